"""The restart loop in one process: run, classify, back off, run again (pure Python).

Used by ``airflow-conduit run --recover`` and by the operator when it is not deferrable; the deferrable
operator does the same steps across a deferral instead of :func:`time.sleep`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from airflow_conduit.errors import classify_exit_code
from airflow_conduit.recovery.decision import RecoveryDecision
from airflow_conduit.recovery.history import PipelineRecovery, cancel_recovery

Outcome = Literal["stopped", "fatal", "transient"]


def classify(payload: Mapping[str, Any]) -> Outcome:
    """How a run ended, from its exit payload: the error's ``kind`` first, else the exit code."""
    error = payload.get("error") or {}
    try:
        exit_code = int(payload.get("exit_code", 0))
    except (TypeError, ValueError):
        exit_code = 75
    if exit_code == 0 and not error:
        return "stopped"
    kind = error.get("kind") if isinstance(error, Mapping) else None
    if kind in ("fatal", "transient"):
        return kind
    return classify_exit_code(exit_code) or "stopped"


@dataclass
class RecoveryResult:
    """The end of a run-with-recovery: the last payload and every decision taken on the way."""

    outcome: Literal["stopped", "degraded", "cancelled"]
    payload: Mapping[str, Any]
    payloads: list[Mapping[str, Any]] = field(default_factory=list)
    decisions: list[RecoveryDecision] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.payloads)

    @property
    def restarts(self) -> int:
        return sum(1 for d in self.decisions if d.restart)


def wait_until(
    moment: datetime,
    *,
    clock: Callable[[], datetime],
    sleep: Callable[[float], None] = time.sleep,
    stop_requested: Callable[[], bool] | None = None,
    poll: float = 1.0,
) -> bool:
    """Sleep until ``moment``; returns ``False`` when a stop was requested meanwhile."""
    while True:
        if stop_requested is not None and stop_requested():
            return False
        remaining = (moment - clock()).total_seconds()
        if remaining <= 0:
            return True
        sleep(min(poll, remaining))


def run_with_recovery(
    run_once: Callable[[], Mapping[str, Any]],
    recovery: PipelineRecovery,
    *,
    sleep: Callable[[float], None] = time.sleep,
    stop_requested: Callable[[], bool] | None = None,
) -> RecoveryResult:
    """Run a pipeline until it stops gracefully or is degraded, restarting it after transient failures.

    :param run_once: runs the pipeline once and returns its exit payload (with ``exit_code``)
    :param recovery: the pipeline's recovery bookkeeping (policy, state dir)
    :param sleep: how to wait (tests pass a fake)
    :param stop_requested: polled during a backoff; when it returns ``True`` the restart is cancelled
    """
    if stop_requested is None:
        stop_requested = lambda: recovery.state.stop_requested  # noqa: E731
    result = RecoveryResult(outcome="stopped", payload={})
    recovery.mark_restarted()
    while True:
        payload = run_once()
        result.payload = payload
        result.payloads.append(payload)
        outcome = classify(payload)
        if outcome == "stopped":
            recovery.on_success(payload)
            result.outcome = "stopped"
            return result
        if outcome == "fatal":
            recovery.on_fatal(payload)
            result.outcome = "degraded"
            return result
        decision = recovery.on_failure(payload)
        result.decisions.append(decision)
        if not decision.restart:
            result.outcome = "degraded"
            return result
        if not wait_until(
            decision.start_at, clock=recovery.clock, sleep=sleep, stop_requested=stop_requested
        ):
            cancel_recovery(recovery)
            result.outcome = "cancelled"
            return result
        recovery.mark_restarted()
