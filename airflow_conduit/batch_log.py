"""The per-batch history of a pipeline: ``STATE_DIR/PIPELINE_ID/batches.jsonl`` (pure Python).

The engine appends one :class:`BatchEntry` per committed micro-batch; the UI's charts read them
(records/s, DLQ records, batch duration and source lag over the last hour, day or run). The counters of
the entries of one run (same ``run_started_at``) add up to that run's exit payload ``records``.

One JSON object per line, appended with a single ``write``, so a reader sees whole lines except perhaps
a torn last one after a crash, which is skipped (and a later append starts on a line of its own).
The file is bounded: once it holds more than twice :data:`MAX_BATCHES` lines, its last
:data:`MAX_BATCHES` lines replace it atomically (:func:`airflow_conduit.files.write_atomic`), so a
reader never sees half of the rewrite. Only the engine that holds the pipeline's run lock appends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_conduit.files import write_atomic
from airflow_conduit.state import PipelineState, parse_time

MAX_BATCHES = 10_000
"""The entries kept: the file is cut back to these once it holds twice as many."""

_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class SourceLag:
    """How far a source is behind what it could read, at the end of a batch."""

    value: float
    unit: str
    """``bytes`` (file source: bytes of its files not yet read), ``WAL bytes`` (Postgres: WAL the
    replication slot still holds once the batch is acknowledged), ``records``."""

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceLag:
        return cls(float(data["value"]), str(data["unit"]))


@dataclass(frozen=True)
class BatchEntry:
    """One committed micro-batch: one line of ``batches.jsonl``."""

    batch: int
    """Spark's batch id (it restarts at 0 with a new checkpoint)."""
    run_started_at: str
    """The start of the run the batch belongs to (``state.TIME_FORMAT``): groups batches into runs."""
    started_at: str
    ended_at: str
    seconds: float
    """The batch's time in the engine: processors, destinations, DLQ (a monotonic clock)."""
    read: int
    written: int
    """Records written, summed over the destinations."""
    written_by: dict[str, int] = field(default_factory=dict)
    """Records written per destination node (``pipeline:destination``), as the exit payload's ``written``."""
    filtered: int = 0
    dlq: int = 0
    """Records nacked into the DLQ."""
    lag: dict[str, SourceLag] = field(default_factory=dict)
    """By source node id (``pipeline:source``); only sources that report a lag."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "run_started_at": self.run_started_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "seconds": self.seconds,
            "read": self.read,
            "written": self.written,
            "written_by": dict(self.written_by),
            "filtered": self.filtered,
            "dlq": self.dlq,
            "lag": {node: lag.to_dict() for node, lag in self.lag.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchEntry:
        """An entry as :meth:`to_dict` wrote it; raises ``KeyError``/``TypeError``/``ValueError`` on
        anything else."""
        return cls(
            batch=int(data["batch"]),
            run_started_at=str(data["run_started_at"]),
            started_at=str(data["started_at"]),
            ended_at=str(data["ended_at"]),
            seconds=float(data["seconds"]),
            read=int(data["read"]),
            written=int(data["written"]),
            written_by={str(k): int(v) for k, v in (data.get("written_by") or {}).items()},
            filtered=int(data.get("filtered") or 0),
            dlq=int(data.get("dlq") or 0),
            lag={str(k): SourceLag.from_dict(v) for k, v in (data.get("lag") or {}).items()},
        )


# The lines the file held after this process's last append, by path: ``(size, lines)``. Counting the
# lines of a 20,000-line file at every batch would read megabytes per batch; the count is taken once
# and carried on while the size is the one this process left (nobody else appends: the run lock).
_known: dict[Path, tuple[int, int]] = {}


def append_batch(state: PipelineState, entry: BatchEntry) -> None:
    """Append ``entry`` as one line of ``batches.jsonl``; cut the file back to its last
    :data:`MAX_BATCHES` lines once it holds more than twice as many."""
    path = state.batches_file
    line = json.dumps(entry.to_dict(), separators=(",", ":")) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        size = fh.tell()
        if size and not _ends_with_newline(path, size):
            line = "\n" + line  # a torn line of a crashed writer: ours starts a line of its own
        fh.write(line.encode("utf-8"))
        after = fh.tell()
    known = _known.get(path)
    lines = known[1] + line.count("\n") if known is not None and known[0] == size else _count_lines(path)
    if lines > 2 * MAX_BATCHES:
        kept = path.read_bytes().splitlines(keepends=True)[-MAX_BATCHES:]
        write_atomic(path, b"".join(kept).decode("utf-8", errors="replace"))
        after, lines = path.stat().st_size, len(kept)
    _known[path] = (after, lines)


def read_batches(state: PipelineState, *, since: datetime | None = None) -> list[BatchEntry]:
    """The entries of ``batches.jsonl`` in the order written; with ``since``, those that ended at or
    after it. Lines that do not parse (a torn last line after a crash) are skipped."""
    try:
        lines = state.batches_file.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    cutoff = parse_time(since) if since is not None else None
    entries = []
    for line in lines:
        try:
            entry = BatchEntry.from_dict(json.loads(line))
            if cutoff is not None and parse_time(entry.ended_at) < cutoff:
                continue
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        entries.append(entry)
    return entries


def _ends_with_newline(path: Path, size: int) -> bool:
    with path.open("rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) == b"\n"


def _count_lines(path: Path) -> int:
    count = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_READ_CHUNK):
            count += chunk.count(b"\n")
    return count


__all__ = ["MAX_BATCHES", "BatchEntry", "SourceLag", "append_batch", "read_batches"]
