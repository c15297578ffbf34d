"""Watch a pipeline's status and exit payload in its state dir until it stops, degrades or fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_conduit.state import ExitPayload, PipelineState, Status, format_time, parse_time
from airflow_conduit.triggers.hand_over import wait_for_hand_over

TERMINAL = tuple(status for status in Status if status.terminal)


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except (TypeError, ValueError):
        return None


def check_pipeline(
    state: PipelineState,
    *,
    newer_than: datetime | None = None,
    failed_grace: float = 10.0,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Where a pipeline stands: ``{"status", "terminal", "payload", "error", "message", ...}``.

    - ``running``, ``recovering``: not terminal.
    - ``stopped``: terminal, a graceful stop.
    - ``degraded``: terminal, fatal.
    - ``failed`` (transient, nobody recovering it): terminal once it has stayed so for ``failed_grace``
      seconds, since whoever recovers the pipeline turns it into ``recovering`` right after a failure.
    - ``unknown``: no status (yet), or none newer than ``newer_than``.

    :param state: the pipeline's state dir
    :param newer_than: ignore a status last written before this (an earlier run's)
    :param failed_grace: seconds a ``failed`` status must last to count as final
    :param now: the current time (tests)
    """
    now = now or datetime.now(UTC)
    status = state.read_status()
    exit_json = state.read_exit_payload()  # the event carries it as written
    payload = ExitPayload.from_dict(exit_json) if isinstance(exit_json, Mapping) else None
    updated = _time((status or {}).get("updated_at"))
    if status is None and payload is not None:
        # Only an exit payload: take its outcome.
        ended = _time(payload.ended_at)
        if newer_than is None or (ended is not None and ended >= newer_than):
            status = {
                "status": Status.of_kind(payload.kind).value,
                "updated_at": payload.ended_at,
                "error": payload.error.to_dict() if payload.error is not None else None,
            }
            updated = ended
    result: dict[str, Any] = {
        "pipeline_id": state.pipeline_id,
        "state_dir": str(state.state_dir),
        "status": "unknown",
        "terminal": False,
        "payload": None,
        "error": None,
        "updated_at": format_time(updated) if updated else None,
        "checked_at": format_time(now),
    }
    if status is None or (newer_than is not None and (updated is None or updated < newer_than)):
        result["message"] = "no status yet" if status is None else "no status since the watch began"
        return result
    name = status.get("status", "unknown")
    result["status"] = name
    result["error"] = status.get("error")
    if payload is not None:
        ended = _time(payload.ended_at)
        if newer_than is None or ended is None or ended >= newer_than:
            result["payload"] = exit_json
    if name == Status.RECOVERING:
        result["attempt"] = status.get("attempt")
        result["next_start_at"] = status.get("next_start_at")
    if name in (Status.STOPPED, Status.DEGRADED):
        result["terminal"] = True
    elif name == Status.FAILED:
        age = (now - updated).total_seconds() if updated else failed_grace
        result["terminal"] = age >= failed_grace
    return result


class PipelineStatusTrigger(BaseTrigger):
    """Polls a pipeline's state dir until its status is final; the event is :func:`check_pipeline`'s.

    :param pipeline_id: the pipeline
    :param state_dir: its state dir
    :param poll_interval: seconds between polls
    :param newer_than: ISO-8601 time; a status written before it is an earlier run's and is ignored
    :param failed_grace: seconds a ``failed`` status must last to count as final
    :param not_before: no event before this time (ISO-8601 UTC): the deferring worker's hand-over
        (:mod:`~airflow_conduit.triggers.hand_over`)
    """

    def __init__(
        self,
        *,
        pipeline_id: str,
        state_dir: str,
        poll_interval: float = 5.0,
        newer_than: str | None = None,
        failed_grace: float = 10.0,
        not_before: str | None = None,
    ) -> None:
        super().__init__()
        self.pipeline_id = pipeline_id
        self.state_dir = str(state_dir)
        self.poll_interval = float(poll_interval)
        self.newer_than = format_time(parse_time(newer_than)) if newer_than else None
        self.failed_grace = float(failed_grace)
        self.not_before = not_before

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline_id": self.pipeline_id,
                "state_dir": self.state_dir,
                "poll_interval": self.poll_interval,
                "newer_than": self.newer_than,
                "failed_grace": self.failed_grace,
                "not_before": self.not_before,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        state = PipelineState.of(self.state_dir, self.pipeline_id)
        newer_than = parse_time(self.newer_than) if self.newer_than else None
        last = None
        handed_over = self.not_before is None
        while True:
            result = check_pipeline(state, newer_than=newer_than, failed_grace=self.failed_grace)
            if result["terminal"] and not handed_over:
                await wait_for_hand_over(self.not_before)
                handed_over = True
                continue  # look again: the status may have moved on meanwhile
            if result["terminal"]:
                yield TriggerEvent(result)
                return
            if result["status"] != last:
                self.log.info("Pipeline %s is %s", self.pipeline_id, result["status"])
                last = result["status"]
            await asyncio.sleep(self.poll_interval)
