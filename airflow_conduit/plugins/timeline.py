"""A pipeline's runs on a time axis, from its audit log (pure Python: no Airflow, no FastAPI).

Each run begins with a ``started`` event (the engine's) and ends with the first of:

- ``stopped``: a graceful stop;
- ``degraded``: a fatal error, or recovery gave up (the recovery's ``degraded`` follows the run's ``fault``);
- ``recovering``: a transient fault that recovery decided to restart after a backoff; the wait is the
  run's ``backoff`` (``from`` the decision ``until`` the ``restarted`` event, or the planned start while
  it has not come), and the next run's ``attempt`` is the restart's;
- ``fault`` alone (transient, nobody recovers it): ``failed``;
- a new ``started`` with nothing between: the engine vanished (killed): ``failed`` at its last event.

A ``refused`` event (another engine held the pipeline) and a ``degraded`` without a run (an invalid
pipeline file) are runs of their own that end when they begin. A run with no end yet is ``running``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Event = Mapping[str, Any]


@dataclass(frozen=True)
class Fault:
    time: str
    kind: str | None
    code: str | None
    node: str | None
    message: str | None

    @classmethod
    def of(cls, time: str, error: Mapping[str, Any], kind: str | None = None) -> Fault:
        return cls(
            time=time,
            kind=kind or error.get("kind") or error.get("classification"),
            code=error.get("code"),
            node=error.get("node"),
            message=error.get("message"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "kind": self.kind,
            "code": self.code,
            "node": self.node,
            "message": self.message,
        }


@dataclass
class Backoff:
    attempt: int | None
    delay: float | None
    """Seconds, as recovery decided."""
    start: str
    """When the wait began (the ``recovering`` decision): ``from`` in the JSON."""
    until: str | None
    """The ``restarted`` event's time, else the planned ``next_start_at``."""
    restarted: bool = False
    """The restart happened (``until`` is when); ``False`` while waiting or when it never came."""
    cancelled: bool = False
    """A graceful stop during the wait: no restart (``until`` is the stop)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "delay": self.delay,
            "from": self.start,
            "until": self.until,
            "restarted": self.restarted,
            "cancelled": self.cancelled,
        }


@dataclass
class Run:
    started_at: str
    ended_at: str | None = None
    end: str = "running"
    """``stopped``, ``degraded``, ``failed``, ``recovering``, ``running`` or ``refused``."""
    mode: str | None = None
    airflow: Mapping[str, Any] | None = None
    attempt: int | None = None
    """The restart attempt that started this run; ``None`` for a first run."""
    faults: list[Fault] = field(default_factory=list)
    backoff: Backoff | None = None
    last_event_at: str | None = None

    @property
    def open(self) -> bool:
        return self.end == "running"

    def close(self, end: str, time: str) -> None:
        self.end, self.ended_at = end, time

    def add_fault(self, fault: Fault) -> None:
        # The recovery's and the operator's events repeat the run's fault: keep it once.
        if not any((f.code, f.node) == (fault.code, fault.node) for f in self.faults):
            self.faults.append(fault)

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "end": self.end,
            "mode": self.mode,
            "airflow": dict(self.airflow) if self.airflow else None,
            "attempt": self.attempt,
            "faults": [f.to_dict() for f in self.faults],
            "backoff": self.backoff.to_dict() if self.backoff else None,
        }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


class _Builder:
    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.next_attempt: int | None = None
        self.refused: list[Run] = []
        self.previous: str | None = None
        """The last event with a handler: a ``degraded`` or ``recovering`` right after a ``fault`` is that
        fault's run's end; after anything else it is another story (an invalid file, a lost run)."""

    @property
    def last(self) -> Run | None:
        return self.runs[-1] if self.runs else None

    def current(self, time: str) -> Run:
        """The open run, or one made up for an event that ended a run whose start the log lost."""
        last = self.last
        if last is not None and last.open:
            return last
        run = Run(started_at=time, attempt=self.next_attempt)
        self.runs.append(run)
        return run

    def add(self, event: Event) -> None:
        name, time = str(event.get("event")), str(event.get("time") or "")
        handler = getattr(self, f"on_{name}", None)
        if handler is not None:
            handler(event, time)
            if name != "refused":
                self.previous = name
        if self.last is not None and self.last.open:
            self.last.last_event_at = time

    def on_started(self, e: Event, time: str) -> None:
        last = self.last
        if last is not None and last.open:  # no end event: the engine was killed
            last.close("failed", last.last_event_at or last.started_at)
        airflow = e.get("airflow")
        self.runs.append(
            Run(
                started_at=time,
                mode=e.get("mode"),
                airflow=dict(airflow) if isinstance(airflow, Mapping) else None,
                attempt=self.next_attempt,
                last_event_at=time,
            )
        )
        self.next_attempt = None

    def on_fault(self, e: Event, time: str) -> None:
        run = self.current(time)
        run.add_fault(Fault.of(time, e, kind=e.get("classification")))
        if run.open:
            run.close("degraded" if e.get("classification") == "fatal" else "failed", time)

    def _ended(self, time: str) -> Run:
        """The run an end event belongs to: the open one, else the last that just failed."""
        last = self.last
        if last is not None and (last.open or (self.previous == "fault" and last.backoff is None)):
            return last
        return self.current(time)

    def on_recovering(self, e: Event, time: str) -> None:
        run = self._ended(time)
        if isinstance(e.get("error"), Mapping) and e["error"]:
            run.add_fault(Fault.of(time, e["error"]))
        if run.ended_at is None or run.open:
            run.ended_at = time
        run.end = "recovering"
        attempt = _int(e.get("attempt"))
        run.backoff = Backoff(attempt, _number(e.get("delay")), time, e.get("next_start_at"))
        self.next_attempt = attempt

    def on_restarted(self, e: Event, time: str) -> None:
        last = self.last
        if last is not None and last.backoff is not None and not last.backoff.restarted:
            last.backoff.until, last.backoff.restarted = time, True
        self.next_attempt = _int(e.get("attempt")) or self.next_attempt

    def on_degraded(self, e: Event, time: str) -> None:
        last = self.last
        error: Mapping[str, Any] = e["error"] if isinstance(e.get("error"), Mapping) else {}
        follows_fault = self.previous in ("fault", "degraded") and last is not None and last.backoff is None
        if last is not None and (last.open or follows_fault):
            run = last
        else:  # degraded before any run (an invalid pipeline file)
            run = Run(started_at=time, attempt=self.next_attempt)
            self.runs.append(run)
        if not run.faults:
            cause = e.get("cause")
            run.add_fault(Fault.of(time, cause if isinstance(cause, Mapping) and cause else error))
        run.close("degraded", time if run.ended_at is None or run.open else run.ended_at)
        self.next_attempt = None

    def on_stopped(self, e: Event, time: str) -> None:
        last = self.last
        if last is not None and last.open:
            last.close("stopped", time)
        elif last is not None and last.backoff is not None and not last.backoff.restarted:
            # A stop during the backoff: the restart never comes.
            last.backoff.until, last.backoff.cancelled = time, True
            last.end = "stopped"
        self.next_attempt = None

    def on_refused(self, e: Event, time: str) -> None:
        # Refused runs sit beside the run that holds the lock and never end it: kept apart, so later
        # events still find the open run last, and merged in by time at the end.
        refused = Run(started_at=time, ended_at=time, end="refused")
        if isinstance(e.get("code"), str):
            refused.faults.append(
                Fault(time, "transient", e["code"], None, "another engine runs the pipeline")
            )
        self.refused.append(refused)


def runs(events: Iterable[Event]) -> list[Run]:
    """The runs the audit ``events`` (oldest first, as in the log) tell of, oldest first."""
    builder = _Builder()
    for event in events:
        builder.add(event)
    # A stable sort: runs that began in the same instant keep the log's order.
    return sorted([*builder.runs, *builder.refused], key=lambda run: run.started_at)


def timeline(events: Iterable[Event]) -> dict[str, Any]:
    """``{"runs": [...]}``: the JSON of the timeline route."""
    return {"runs": [run.to_dict() for run in runs(events)]}
