"""The recovery decision: restart after a delay, or give up (pure Python, no I/O).

Conduit counts restarts in a sliding window: each restart stays "active" from the moment it is decided
until ``delay + max_retries_window`` later (``time.AfterFunc(duration + window, attempts.Add(-1))``), and
a transient failure while ``max_retries`` restarts are active degrades the pipeline. The attempt number
of a restart is the number of active restarts including itself, so delays shrink again as old
restarts leave the window.

Added here (Conduit's design promised it and never built it): a run that processed a record end to end
clears the history, so a pipeline that recovered and worked for a while starts again at attempt 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from airflow_conduit.errors import Code
from airflow_conduit.recovery.policy import RecoveryPolicy, format_duration
from airflow_conduit.state import RunRecords, format_time, parse_time

CANNOT_RECOVER = Code.CANNOT_RECOVER
"""Error code of a pipeline degraded because recovery gave up (Conduit's ErrPipelineCannotRecover)."""


@dataclass(frozen=True)
class Restart:
    """One restart decided after a transient failure."""

    decided_at: datetime
    attempt: int
    delay: timedelta
    error: Mapping[str, Any] | None = None
    restarted_at: datetime | None = None
    """When the restarted run was submitted; ``None`` while it is still pending."""

    @property
    def start_at(self) -> datetime:
        return self.decided_at + self.delay

    def expires_at(self, window: timedelta) -> datetime:
        """When this restart stops counting against ``max_retries``."""
        return self.start_at + window

    def active(self, now: datetime, window: timedelta) -> bool:
        return now < self.expires_at(window)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decided_at": format_time(self.decided_at),
            "attempt": self.attempt,
            "delay": self.delay.total_seconds(),
            "start_at": format_time(self.start_at),
            "error": dict(self.error) if self.error is not None else None,
            "restarted_at": format_time(self.restarted_at) if self.restarted_at else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Restart:
        restarted = data.get("restarted_at")
        return cls(
            decided_at=parse_time(data["decided_at"]),
            attempt=int(data["attempt"]),
            delay=timedelta(seconds=float(data["delay"])),
            error=data.get("error"),
            restarted_at=parse_time(restarted) if restarted else None,
        )


@dataclass(frozen=True)
class RecoveryDecision:
    """What to do after a failure."""

    action: Literal["restart", "degraded"]
    attempt: int
    """The restart's number inside the window (1-based); for ``degraded``, the refused one."""
    delay: timedelta
    decided_at: datetime
    active_restarts: int
    """Restarts still counting in the window when the decision was taken (excluding this one)."""
    reason: str
    reset: bool = False
    """The failed run had made progress, so the history was cleared before deciding."""
    error: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def restart(self) -> bool:
        return self.action == "restart"

    @property
    def start_at(self) -> datetime:
        return self.decided_at + self.delay

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "attempt": self.attempt,
            "delay": self.delay.total_seconds(),
            "decided_at": format_time(self.decided_at),
            "start_at": format_time(self.start_at),
            "active_restarts": self.active_restarts,
            "reason": self.reason,
            "reset": self.reset,
            "error": dict(self.error) if self.error is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecoveryDecision:
        return cls(
            action=data["action"],
            attempt=int(data["attempt"]),
            delay=timedelta(seconds=float(data["delay"])),
            decided_at=parse_time(data["decided_at"]),
            active_restarts=int(data["active_restarts"]),
            reason=data.get("reason", ""),
            reset=bool(data.get("reset", False)),
            error=data.get("error"),
        )


def active_restarts(history: Iterable[Restart], policy: RecoveryPolicy, now: datetime) -> list[Restart]:
    """The restarts of ``history`` that still count at ``now``."""
    return [r for r in history if r.active(now, policy.max_retries_window)]


def made_progress(payload: Mapping[str, Any] | None) -> bool:
    """Whether a run processed at least one record end to end (acked, filtered, or DLQ-handled).

    Reads the exit payload's ``records``; an absent payload or counter counts as no progress.
    """
    if not payload:
        return False
    records = payload.get("records")
    return RunRecords.from_dict(records if isinstance(records, Mapping) else None).progressed


def decide(
    policy: RecoveryPolicy,
    history: Sequence[Restart],
    *,
    now: datetime,
    progressed: bool = False,
    error: Mapping[str, Any] | None = None,
) -> RecoveryDecision:
    """Decide what follows a transient failure at ``now``.

    :param policy: the recovery policy
    :param history: the restarts decided so far (any order; expired ones are ignored)
    :param now: the time of the failure (timezone-aware)
    :param progressed: the failed run processed a record end to end: ``history`` no longer counts
    :param error: the failure's structured error, carried on the decision
    """
    counted = [] if progressed else active_restarts(history, policy, now)
    attempt = len(counted) + 1
    if not policy.enabled:
        return RecoveryDecision(
            action="degraded",
            attempt=attempt,
            delay=timedelta(0),
            decided_at=now,
            active_restarts=len(counted),
            reason="pipeline recovery is turned off (max_retries=0)",
            reset=progressed,
            error=error,
        )
    if not policy.infinite and attempt > policy.max_retries:
        return RecoveryDecision(
            action="degraded",
            attempt=attempt,
            delay=timedelta(0),
            decided_at=now,
            active_restarts=len(counted),
            reason=(
                f"cannot recover: {policy.max_retries} restart(s) already within the "
                f"{format_duration(policy.max_retries_window)} window (max_retries={policy.max_retries})"
            ),
            reset=progressed,
            error=error,
        )
    delay = policy.delay_for(attempt)
    return RecoveryDecision(
        action="restart",
        attempt=attempt,
        delay=delay,
        decided_at=now,
        active_restarts=len(counted),
        reason=f"transient failure: restart {attempt} in {format_duration(delay)}",
        reset=progressed,
        error=error,
    )
