"""Wait for a pipeline started elsewhere to stop, watching its state dir."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_conduit.hooks.exceptions import PipelineDegradedError, PipelineTransientError
from airflow_conduit.recovery.policy import format_duration, parse_duration
from airflow_conduit.state import ExitPayload, PipelineState, Status, format_time, parse_time
from airflow_conduit.triggers.hand_over import not_before
from airflow_conduit.triggers.status import PipelineStatusTrigger, check_pipeline

if TYPE_CHECKING:
    from airflow.sdk import Context


class ConduitPipelineSensor(BaseSensorOperator):
    """Waits until a pipeline stops, through its status and exit payload in the state dir.

    Succeeds on a graceful stop (the exit payload is the XCom value); fails without retry when the
    pipeline is degraded (:class:`PipelineDegradedError`); fails retryably when it failed with a
    transient error and nobody recovers it (:class:`PipelineTransientError`). ``running`` and
    ``recovering`` keep it waiting. Deferred, the polling runs in the triggerer and holds no worker slot.

    :param pipeline_id: the pipeline (templated)
    :param state_dir: its state dir (templated)
    :param newer_than: ignore a status written before this time, an earlier run's (ISO-8601 string or
        datetime; templated, e.g. ``"{{ dag_run.start_date }}"``)
    :param failed_grace: seconds a ``failed`` status must last before it counts (recovery may be about
        to take over)
    :param deferrable: poll in the triggerer once the pipeline has not stopped within
        ``deferral_threshold``
    :param deferral_threshold: how long to poll in the worker before deferring (default: ``[conduit]
        deferral_threshold``, 30 s); the trigger also holds its event that long after the deferral, so
        the resumed sensor never races the worker that deferred
    """

    template_fields: Sequence[str] = ("pipeline_id", "state_dir", "newer_than")
    ui_color = "#e0f0ff"

    def __init__(
        self,
        *,
        pipeline_id: str,
        state_dir: str,
        newer_than: str | datetime | None = None,
        failed_grace: float = 10.0,
        deferrable: bool = True,
        deferral_threshold: timedelta | float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline_id = pipeline_id
        self.state_dir = state_dir
        self.newer_than = newer_than
        self.failed_grace = failed_grace
        self.deferrable = deferrable
        self.deferral_threshold = deferral_threshold

    def resolve_deferral_threshold(self) -> timedelta:
        """How long to poll in the worker first: ``deferral_threshold=``, else ``[conduit]``."""
        if self.deferral_threshold is not None:
            return parse_duration(self.deferral_threshold, name="deferral_threshold")
        from airflow_conduit.hooks.config import deferral_threshold_from_airflow_config

        return deferral_threshold_from_airflow_config()

    def _newer_than(self) -> datetime | None:
        if self.newer_than is None or self.newer_than == "":
            return None
        return parse_time(self.newer_than)

    def _check(self) -> dict[str, Any]:

        state = PipelineState.of(os.path.abspath(self.state_dir), self.pipeline_id)
        return check_pipeline(state, newer_than=self._newer_than(), failed_grace=self.failed_grace)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        threshold = self.resolve_deferral_threshold()
        in_worker_until = time.monotonic() + threshold.total_seconds()
        while True:  # short waits stay in the worker; deferring pays only for longer ones
            result = self._check()
            if result["terminal"]:
                return self._finish(result)
            if time.monotonic() >= in_worker_until:
                break
            time.sleep(max(0.1, min(self.poke_interval, in_worker_until - time.monotonic())))

        newer_than = self._newer_than()
        self.log.info(
            "Pipeline %s is %s after %s; deferring",
            self.pipeline_id,
            result["status"],
            format_duration(threshold),
        )
        self.defer(
            trigger=PipelineStatusTrigger(
                pipeline_id=self.pipeline_id,
                state_dir=os.path.abspath(self.state_dir),
                poll_interval=self.poke_interval,
                newer_than=format_time(newer_than) if newer_than else None,
                failed_grace=self.failed_grace,
                not_before=not_before(threshold),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        result = self._check()
        if not result["terminal"]:
            self.log.info("Pipeline %s is %s", self.pipeline_id, result["status"])
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._finish(result))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        return self._finish(event)

    def _finish(self, result: dict[str, Any]) -> dict[str, Any]:
        """Succeed, or raise, on a final result of :func:`check_pipeline` (or the trigger's event)."""
        status = result.get("status")
        exit_json: dict[str, Any] = result.get("payload") or {}  # exit.json as written: the XCom value
        payload = ExitPayload.from_dict(exit_json) if exit_json else None
        error = result.get("error") or (
            payload.error.to_dict() if payload is not None and payload.error is not None else {}
        )
        message = f"{error.get('code', '')}: {error.get('message', '')}".strip(": ")
        if status == Status.STOPPED:
            self.log.info(
                "Pipeline %s stopped gracefully; records %s",
                self.pipeline_id,
                payload.to_dict()["records"] if payload is not None else None,
            )
            return exit_json or result
        cls = PipelineDegradedError if status == Status.DEGRADED else PipelineTransientError
        what = "is degraded" if cls is PipelineDegradedError else "failed with a transient error"
        raise cls(
            f"pipeline {self.pipeline_id} {what}: {message}",
            pipeline_id=self.pipeline_id,
            state_dir=self.state_dir,
            payload=exit_json,
        )
