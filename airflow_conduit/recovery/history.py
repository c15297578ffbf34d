"""A pipeline's restart history in its state dir, and the status and audit events of recovery.

``STATE_DIR/PIPELINE_ID/recovery.json`` holds the restarts that still count, so the window survives
task retries, worker crashes and scheduler restarts; everything that reads or writes a pipeline's
recovery (the Airflow operator, the retry policy, ``airflow-conduit run --recover``) goes through
:class:`PipelineRecovery`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_conduit.recovery.decision import (
    CANNOT_RECOVER,
    RecoveryDecision,
    Restart,
    active_restarts,
    decide,
    made_progress,
)
from airflow_conduit.recovery.policy import RecoveryPolicy, format_duration
from airflow_conduit.state import PipelineState, Status, format_time, read_json, write_json_atomic

HISTORY_FILE = "recovery.json"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class PipelineRecovery:
    """Recovery bookkeeping of one pipeline.

    :param state: the pipeline's state dir
    :param policy: the recovery policy
    :param clock: returns "now" as an aware datetime (tests pass a fake one)
    :param log: where progress is logged (the operator passes its task logger)
    """

    def __init__(
        self,
        state: PipelineState,
        policy: RecoveryPolicy,
        *,
        clock: Callable[[], datetime] = _utcnow,
        log: logging.Logger | logging.LoggerAdapter | None = None,
    ) -> None:
        self.state = state
        self.policy = policy
        self.clock = clock
        self.log = log or logging.getLogger(__name__)

    # history ------------------------------------------------------------------------------------
    @property
    def history_file(self) -> Path:
        return self.state.root / HISTORY_FILE

    def history(self) -> list[Restart]:
        """Every restart recorded (expired ones included until the next write prunes them)."""
        data = read_json(self.history_file) or {}
        restarts = []
        for item in data.get("restarts", []):
            try:
                restarts.append(Restart.from_dict(item))
            except (KeyError, TypeError, ValueError):
                continue  # a hand-edited or foreign entry: ignore it
        return restarts

    def active(self, now: datetime | None = None) -> list[Restart]:
        """The restarts that still count against ``max_retries``."""
        return active_restarts(self.history(), self.policy, now or self.clock())

    def _save(self, restarts: list[Restart], now: datetime, **extra: Any) -> None:
        keep = [
            r for r in restarts if r.active(now, self.policy.max_retries_window) or r.restarted_at is None
        ]
        data = {
            "pipeline": self.state.pipeline_id,
            "policy": self.policy.to_dict(),
            "restarts": [r.to_dict() for r in keep],
            "updated_at": format_time(now),
            **extra,
        }
        write_json_atomic(self.history_file, data)

    def reset(self, *, reason: str = "reset") -> None:
        """Forget every restart (the next failure is attempt 1 again)."""
        now = self.clock()
        if self.history():
            self.log.info("Pipeline %s: restart history cleared (%s)", self.state.pipeline_id, reason)
        self._save([], now, reset_at=format_time(now), reset_reason=reason)

    def pending_restart(self) -> Restart | None:
        """The last decided restart whose run has not been submitted yet, if any."""
        history = self.history()
        if history and history[-1].restarted_at is None:
            return history[-1]
        return None

    # events -------------------------------------------------------------------------------------
    def on_failure(
        self, payload: Mapping[str, Any] | None, *, now: datetime | None = None
    ) -> RecoveryDecision:
        """Decide and record what follows a transient failure whose exit payload is ``payload``.

        Writes status ``recovering`` (attempt, next start) and an audit event ``recovering``, or, when
        the window is used up or recovery is off, status ``degraded`` and an audit event ``degraded``.
        """
        now = now or self.clock()
        error = dict((payload or {}).get("error") or {}) or None
        progressed = made_progress(payload)
        history = self.history()
        decision = decide(self.policy, history, now=now, progressed=progressed, error=error)
        pid = self.state.pipeline_id
        if progressed and history:
            self.log.info("Pipeline %s processed records before failing: restart count reset", pid)
        if decision.restart:
            kept = [] if progressed else history
            restart = Restart(decided_at=now, attempt=decision.attempt, delay=decision.delay, error=error)
            self._save([*kept, restart], now, last_decision=decision.to_dict())
            self.state.write_status(
                Status.RECOVERING,
                attempt=decision.attempt,
                next_start_at=format_time(decision.start_at),
                delay=decision.delay.total_seconds(),
                error=error,
                recovery=self.policy.to_dict(),
            )
            self.state.audit(
                Status.RECOVERING,
                attempt=decision.attempt,
                delay=decision.delay.total_seconds(),
                next_start_at=format_time(decision.start_at),
                active_restarts=decision.active_restarts,
                reset=decision.reset,
                error=error,
            )
            self.log.warning(
                "Pipeline %s failed with a transient error (%s): recovering, attempt %d, "
                "next start in %s at %s",
                pid,
                _describe_error(error),
                decision.attempt,
                format_duration(decision.delay),
                format_time(decision.start_at),
            )
        else:
            self._save([] if progressed else history, now, last_decision=decision.to_dict())
            self._degrade(decision.reason, code=CANNOT_RECOVER, cause=error, attempt=decision.attempt)
        return decision

    def on_fatal(self, payload: Mapping[str, Any] | None) -> None:
        """Record that a run ended with a fatal error: the pipeline is degraded, no restart."""
        error = dict((payload or {}).get("error") or {}) or None
        reason = f"fatal error: {_describe_error(error)}"
        self._degrade(reason, error=error)

    def on_success(self, payload: Mapping[str, Any] | None = None) -> None:
        """Record a graceful stop: the failure episode is over, the history is cleared."""
        if self.history():
            self.reset(reason="graceful stop")

    def mark_restarted(self) -> Restart | None:
        """Record that the pending restart's run is being submitted now (audit event ``restarted``).

        Returns the restart, or ``None`` when no restart was pending (a first run).
        """
        history = self.history()
        if not history or history[-1].restarted_at is not None:
            return None
        now = self.clock()
        pending = history[-1]
        done = Restart(
            decided_at=pending.decided_at,
            attempt=pending.attempt,
            delay=pending.delay,
            error=pending.error,
            restarted_at=now,
        )
        self._save([*history[:-1], done], now)
        self.state.audit(
            "restarted",
            attempt=done.attempt,
            delay=done.delay.total_seconds(),
            scheduled_start_at=format_time(done.start_at),
        )
        self.log.info(
            "Pipeline %s: restart attempt %d (after %s)",
            self.state.pipeline_id,
            done.attempt,
            format_duration(done.delay),
        )
        return done

    # helpers ------------------------------------------------------------------------------------
    def _degrade(
        self,
        reason: str,
        *,
        code: str | None = None,
        error: Mapping[str, Any] | None = None,
        cause: Mapping[str, Any] | None = None,
        attempt: int | None = None,
    ) -> None:
        if error is None:
            error = {
                "kind": "fatal",
                "code": code or CANNOT_RECOVER,
                "message": reason if cause is None else f"{reason}; last error: {_describe_error(cause)}",
                "node": (cause or {}).get("node"),
            }
        self.state.write_status(Status.DEGRADED, error=dict(error), next_start_at=None)
        events = self.state.read_audit()
        last = events[-1] if events else {}
        if last.get("event") != Status.DEGRADED or last.get("error") != dict(error):
            details: dict[str, Any] = {"reason": reason, "error": dict(error)}
            if attempt is not None:
                details["attempt"] = attempt
            if cause is not None:
                details["cause"] = dict(cause)
            self.state.audit(Status.DEGRADED, **details)
        self.log.error("Pipeline %s is degraded: %s", self.state.pipeline_id, reason)


def _describe_error(error: Mapping[str, Any] | None) -> str:
    if not error:
        return "no error details"
    parts = [str(error.get("code") or error.get("kind") or "error")]
    if error.get("node"):
        parts.append(f"at {error['node']}")
    if error.get("message"):
        parts.append(f"- {error['message']}")
    return " ".join(parts)


def cancel_recovery(recovery: PipelineRecovery, *, reason: str = "stop requested while recovering") -> None:
    """A graceful stop requested during the backoff: no restart, the pipeline is stopped."""
    state = recovery.state
    state.write_status(Status.STOPPED, next_start_at=None, stopped_reason="user")
    state.audit(Status.STOPPED, reason=reason)
    state.clear_stop_request()
    recovery.reset(reason=reason)
    recovery.log.info("Pipeline %s: %s; not restarting", state.pipeline_id, reason)
