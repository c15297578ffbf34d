"""The window-aware backoff of a pipeline restart, waited out in the triggerer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_conduit.state import PipelineState, format_time, parse_time
from airflow_conduit.triggers.hand_over import wait_for_hand_over


class PipelineRecoveryTrigger(BaseTrigger):
    """Waits until a pipeline's next start, then hands the task back to restart it.

    The decision (attempt, delay, start time) was taken by
    :class:`~airflow_conduit.recovery.PipelineRecovery` from the restart history in the state dir;
    the start time is absolute, so a triggerer restart resumes the same wait. A graceful stop requested
    meanwhile (``STATE_DIR/PIPELINE_ID/stop``) ends the wait without a restart, as Conduit does for a
    pipeline stopped while recovering.

    Events: ``{"status": "restart", ...}`` or ``{"status": "stop_requested", ...}`` with
    ``pipeline_id``, ``attempt``, ``start_at``, ``fired_at`` and ``carry``.

    :param pipeline_id: the pipeline
    :param state_dir: its state dir
    :param start_at: when to restart (ISO-8601 UTC, or an aware datetime)
    :param attempt: the restart's attempt number inside the window
    :param delay: the backoff delay in seconds (informational)
    :param poll_interval: how often a stop request is looked for, in seconds
    :param carry: JSON-safe data handed back unchanged in the event (the operator's runs so far), so
        the resumed task has it whichever way the event reaches it
    :param not_before: no event before this time (ISO-8601 UTC), also not a stop: the deferring
        worker's hand-over (:mod:`~airflow_conduit.triggers.hand_over`)
    """

    def __init__(
        self,
        *,
        pipeline_id: str,
        state_dir: str,
        start_at: str | datetime,
        attempt: int,
        delay: float,
        poll_interval: float = 1.0,
        carry: dict[str, Any] | None = None,
        not_before: str | None = None,
    ) -> None:
        super().__init__()
        self.pipeline_id = pipeline_id
        self.state_dir = str(state_dir)
        self.start_at = format_time(parse_time(start_at))
        self.attempt = int(attempt)
        self.delay = float(delay)
        self.poll_interval = float(poll_interval)
        self.carry = carry
        self.not_before = not_before

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline_id": self.pipeline_id,
                "state_dir": self.state_dir,
                "start_at": self.start_at,
                "attempt": self.attempt,
                "delay": self.delay,
                "poll_interval": self.poll_interval,
                "carry": self.carry,
                "not_before": self.not_before,
            },
        )

    def _event(self, status: str) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "pipeline_id": self.pipeline_id,
                "state_dir": self.state_dir,
                "attempt": self.attempt,
                "delay": self.delay,
                "start_at": self.start_at,
                "fired_at": format_time(datetime.now(UTC)),
                "carry": self.carry,
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        state = PipelineState.of(self.state_dir, self.pipeline_id)
        start_at = parse_time(self.start_at)
        self.log.info(
            "Pipeline %s recovering: restart attempt %d at %s", self.pipeline_id, self.attempt, self.start_at
        )
        await wait_for_hand_over(self.not_before)
        while True:
            if state.stop_requested:
                yield self._event("stop_requested")
                return
            remaining = (start_at - datetime.now(UTC)).total_seconds()
            if remaining <= 0:
                break
            await asyncio.sleep(min(self.poll_interval, remaining))
        yield self._event("restart")
