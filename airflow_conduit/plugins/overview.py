"""What the UI shows of a pipeline, read from its state dir (pure Python: no Airflow, no FastAPI).

Everything comes through :mod:`airflow_conduit.state` and :mod:`airflow_conduit.dlq_tools`, the same
readers the CLI uses, so the UI and ``airflow-conduit status`` agree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_conduit import dlq_tools
from airflow_conduit.state import ExitPayload, PipelineState, Status, list_pipelines, parse_time

METRICS_FILE = "metrics.prom"  # engine/metrics.py writes it; not imported from there (it needs pyspark)
RECENT_EVENTS = 20
DLQ_SAMPLE = 10


@dataclass(frozen=True)
class PipelineOverview:
    """One pipeline as the UI lists it."""

    state_dir: str
    pipeline_id: str
    status: str
    """A :class:`Status`, or what ``status.json`` says if it is none of them, or ``unknown``."""
    counters: Mapping[str, Any]
    error: Mapping[str, Any] | None
    updated_at: str | None
    throughput: float | None
    """Records read per second over the last run (the exit payload's), or ``None`` while unknown."""
    batches: int | None
    recovery: Mapping[str, Any] = field(default_factory=dict)
    """``attempt``, ``next_start_at``, ``delay`` while recovering."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "state_dir": self.state_dir,
            "pipeline": self.pipeline_id,
            "status": self.status,
            "counters": dict(self.counters),
            "error": dict(self.error) if self.error else None,
            "updated_at": self.updated_at,
            "throughput": self.throughput,
            "batches": self.batches,
            "recovery": dict(self.recovery),
        }


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    try:
        return (parse_time(end) - parse_time(start)).total_seconds()
    except ValueError:
        return None


def throughput(exit_payload: ExitPayload | None) -> float | None:
    """Records read per second of a finished run: ``read / duration``."""
    if exit_payload is None or exit_payload.records is None:
        return None
    seconds = exit_payload.duration_seconds
    if seconds is None:
        seconds = _seconds_between(exit_payload.started_at, exit_payload.ended_at)
    if not seconds or seconds <= 0:
        return None
    return round(float(exit_payload.records.read) / float(seconds), 1)


def overview(state: PipelineState) -> PipelineOverview:
    """The pipeline's status (status.json first: it also says ``recovering``; else the exit payload)."""
    status = state.read_status() or {}
    payload = state.read_exit()
    name = status.get("status") or (payload.status if payload else None) or "unknown"
    counters = status.get("counters") or (payload.records.to_dict() if payload and payload.records else {})
    if "error" in status:
        error = status["error"]
    else:
        error = payload.error.to_dict() if payload and payload.error else None
    recovery = {k: status[k] for k in ("attempt", "next_start_at", "delay") if status.get(k) is not None}
    if name != Status.RECOVERING:
        recovery = {}
    batches = status.get("batches", payload.batches if payload else None)
    return PipelineOverview(
        state_dir=str(state.state_dir),
        pipeline_id=state.pipeline_id,
        status=name,
        counters=counters,
        error=error or None,
        updated_at=status.get("updated_at") or (payload.ended_at if payload else None),
        throughput=throughput(payload) if name != Status.RUNNING else None,
        batches=batches,
        recovery=recovery,
    )


def find_pipelines(state_dirs: Iterable[str | os.PathLike[str]]) -> list[PipelineState]:
    """Every pipeline of the configured state dirs, in their order, then by id."""
    found: list[PipelineState] = []
    for directory in state_dirs:
        found += list_pipelines(directory)
    return found


def find_pipeline(
    state_dirs: Sequence[str | os.PathLike[str]], pipeline_id: str, state_dir: str | None = None
) -> PipelineState | None:
    """The pipeline ``pipeline_id`` of a configured state dir; ``state_dir`` picks one if several hold it.

    Only pipelines listed in the configured dirs are found, so a request cannot name another path.
    """
    wanted = os.path.realpath(state_dir) if state_dir else None
    for state in find_pipelines(state_dirs):
        if state.pipeline_id != pipeline_id:
            continue
        if wanted is None or os.path.realpath(state.state_dir) == wanted:
            return state
    return None


def recent_events(state: PipelineState, limit: int = RECENT_EVENTS) -> list[dict[str, Any]]:
    """The last ``limit`` audit-log events, newest first."""
    return list(reversed(state.read_audit()[-limit:]))


def dlq(state: PipelineState, sample: int = DLQ_SAMPLE) -> dict[str, Any]:
    """The DLQ's summary (count, positions, error codes, nodes) and its last ``sample`` records."""
    entries = dlq_tools.read_dlq(state.dlq_dir)
    summary = dlq_tools.summarize(entries)
    summary["sample"] = [
        {**entry.to_dict(), "position": dlq_tools.position_text(entry.position)}
        for entry in entries[-sample:]
    ]
    return summary


def read_metrics(state: PipelineState) -> dict[str, float]:
    """The samples of the pipeline's ``metrics.prom`` (``{'name{labels}': value}``); empty if none."""
    path = Path(state.root) / METRICS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            values[key] = float(value)
        except ValueError:
            continue
    return values


def details(state: PipelineState) -> dict[str, Any]:
    """Everything the pipeline page shows, as JSON-ready data."""
    return {
        **overview(state).to_dict(),
        "exit": state.read_exit_payload(),
        "events": recent_events(state),
        "dlq": dlq(state),
        "metrics": read_metrics(state),
    }


def latest_event(state: PipelineState, name: str) -> dict[str, Any] | None:
    """The pipeline's newest audit event called ``name``, or ``None``."""
    return next((e for e in reversed(state.read_audit()) if e.get("event") == name), None)


@dataclass(frozen=True)
class AirflowContext:
    """An Airflow DAG run or task instance, as the UI's external views name it (``None``: any)."""

    dag_id: str
    run_id: str | None = None
    task_id: str | None = None
    map_index: str | None = None

    def matches(self, airflow: Mapping[str, Any]) -> bool:
        """``airflow`` (a ``started`` event's) is this run / task; a map index the event does not hold,
        or ``-1`` (Airflow's "not mapped"), does not rule it out."""
        if str(airflow.get("dag_id")) != self.dag_id:
            return False
        for key in ("run_id", "task_id"):
            wanted = getattr(self, key)
            if wanted and str(airflow.get(key)) != wanted:
                return False
        held = airflow.get("map_index")
        if self.map_index not in (None, "", "-1") and held not in (None, "", -1, "-1"):
            return str(held) == self.map_index
        return True


def pipeline_run_by(states: Iterable[PipelineState], context: AirflowContext) -> PipelineState | None:
    """The pipeline whose latest ``started`` event that matches ``context`` is the newest of all."""
    best: tuple[datetime, PipelineState] | None = None
    for state in states:
        for event in reversed(state.read_audit()):
            airflow = event.get("airflow")
            if event.get("event") != "started" or not isinstance(airflow, Mapping):
                continue
            if context.matches(airflow):
                try:
                    moment = parse_time(str(event.get("time")))
                except ValueError:
                    break
                if best is None or moment > best[0]:
                    best = (moment, state)
                break
    return best[1] if best else None
