"""``airflow-conduit inspect``: the records of a micro-batch, read again from its offsets (no Spark).

A batch's offsets in Spark's offset log fix exactly which records it holds (sources are replayable:
the same range yields the same records; the Postgres source's snapshot pages hold the rows as they are
now, and a CDC range only until its batch commits and the slot releases it). Each source's own stream
reader (``partitions(start, end)`` and ``read(partition)``) is called here in plain Python, as Spark's
Python worker would, so an operator can see what a failed or committed batch contained: which record
is the poison one, what reached a destination. Records are shown as the source read them, before any
processor, in OpenCDC JSON form (positions and raw data base64, structured data as JSON), as a file
destination writes them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_conduit.config.model import ConnectorConfig, PipelineConfig
from airflow_conduit.config.registry import BUILTIN
from airflow_conduit.engine.connectors import SourceContext, plugins
from airflow_conduit.offsets import OffsetLog, OffsetLogError
from airflow_conduit.record import META_SOURCE_CONNECTOR, SOURCE_DEFAULTS, SOURCE_TYPES, position_text
from airflow_conduit.state import PipelineState

# A source's stream reader (its plugin is ``inspectable``) may add two methods for ``inspect``:
# ``inspection_start()``, the initial offset without side effects (``initialOffset`` may create what a run
# needs), and ``unreadable(start, end)``, why a range cannot be read again (None when it can).
_COLUMNS = tuple(SOURCE_TYPES)


@dataclass(frozen=True)
class InspectedRecord:
    source: str
    record: dict[str, Any]
    """OpenCDC JSON form: ``{position (base64), operation, metadata, key, payload: {before, after}}``."""
    position: bytes
    acked: bool
    """Acknowledged by ``airflow-conduit ack``: the engine skips it."""

    @property
    def position_text(self) -> str:
        return position_text(self.position) or ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "position_text": self.position_text,
            "acked": self.acked,
            "record": self.record,
        }


@dataclass(frozen=True)
class SourceRange:
    source: str
    plugin: str
    start: Any
    end: Any
    count: int
    unreadable: str = ""
    """Why the range was not read again (its records are not shown), if it was not."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "plugin": self.plugin,
            "start": self.start,
            "end": self.end,
            "count": self.count,
            "unreadable": self.unreadable or None,
        }


@dataclass(frozen=True)
class InspectedBatch:
    batch_id: int
    committed: bool
    sources: tuple[SourceRange, ...]
    records: tuple[InspectedRecord, ...] = field(default=())

    @property
    def count(self) -> int:
        return sum(s.count for s in self.sources)

    def to_dict(self, limit: int | None = None) -> dict[str, Any]:
        records = self.records if limit is None else self.records[:limit]
        return {
            "batch": self.batch_id,
            "committed": self.committed,
            "records_total": self.count,
            "sources": [s.to_dict() for s in self.sources],
            "records": [r.to_dict() for r in records],
        }


def stream_reader(source: ConnectorConfig) -> Any:
    """The source's Spark stream reader, built as Spark would build it, for use in plain Python."""
    ctx = SourceContext(source.id, source.node_id, stop_file="", parallelism=1)
    reader = plugins.stream_reader(source, ctx)
    if reader is None:
        readable = sorted(s.name for s in BUILTIN if s.inspectable)
        raise OffsetLogError(
            f"source {source.id} ({source.plugin}): inspect can re-read only {', '.join(readable)}"
        )
    return reader


def _rows(chunk: Any) -> Iterator[dict[str, Any]]:
    """A stream reader yields tuples (in SOURCE_SCHEMA order) or Arrow record batches (of some of its
    columns: the others take their defaults)."""
    if isinstance(chunk, pa.RecordBatch):
        defaults = {**dict.fromkeys(_COLUMNS), **SOURCE_DEFAULTS}
        for row in chunk.to_pylist():
            yield {**defaults, **row}
    else:
        yield dict(zip(_COLUMNS, chunk, strict=True))


def _data(text: str | None, raw: bytes | None) -> Any:
    if text is not None:
        return json.loads(text)
    return None if raw is None else base64.b64encode(bytes(raw)).decode("ascii")


def _opencdc(row: dict[str, Any], node_id: str) -> dict[str, Any]:
    metadata = row["metadata"] or {}
    if not isinstance(metadata, dict):  # Arrow maps arrive as (key, value) pairs
        metadata = dict(metadata)
    return {
        "position": base64.b64encode(bytes(row["position"])).decode("ascii"),
        "operation": row["operation"],
        "metadata": {**metadata, META_SOURCE_CONNECTOR: node_id},
        "key": _data(row["key_json"], row["key_raw"]),
        "payload": {
            "before": _data(row["before_json"], row["before_raw"]),
            "after": _data(row["after_json"], row["after_raw"]),
        },
    }


def read_range(
    source: ConnectorConfig, reader: Any, start: Any, end: Any, acked: frozenset[bytes]
) -> list[InspectedRecord]:
    out = []
    for partition in reader.partitions(start, end):
        for chunk in reader.read(partition):
            for row in _rows(chunk):
                position = bytes(row["position"])
                out.append(
                    InspectedRecord(source.id, _opencdc(row, source.node_id), position, position in acked)
                )
    return out


def inspect_batch(pipeline: PipelineConfig, state: PipelineState, batch_id: int) -> InspectedBatch:
    """The records of micro-batch ``batch_id``, per source in source order, sources in pipeline order.

    :raises OffsetLogError: no offset log yet, or the batch is not in it
    :raises ConduitError: a source cannot be read (its server is unreachable, say)
    """
    with _stream_readers(pipeline) as readers:
        return _inspect(pipeline, state, readers, batch_id)


@contextmanager
def _stream_readers(pipeline: PipelineConfig) -> Iterator[list[Any]]:
    """One reader per source, shared by the batches inspected (a reader may hold a connection)."""
    readers = [stream_reader(s) for s in pipeline.sources]
    try:
        yield readers
    finally:
        for reader in readers:
            reader.stop()


def _inspect(
    pipeline: PipelineConfig, state: PipelineState, readers: list[Any], batch_id: int
) -> InspectedBatch:
    log = OffsetLog.of(state)
    sources = pipeline.sources
    ranges = log.ranges(batch_id, len(sources), lambda i: _initial_offset(readers[i]))
    records: list[InspectedRecord] = []
    summaries = []
    for source, reader, (start, end) in zip(sources, readers, ranges, strict=True):
        check = getattr(reader, "unreadable", None)
        reason = check(start, end) if check else None
        if reason:
            summaries.append(SourceRange(source.id, source.plugin, start, end, 0, reason))
            continue
        acked = frozenset(state.acked_positions(source.id))
        read = read_range(source, reader, start, end, acked)
        records += read
        summaries.append(SourceRange(source.id, source.plugin, start, end, len(read)))
    return InspectedBatch(batch_id, log.is_committed(batch_id), tuple(summaries), tuple(records))


def _initial_offset(reader: Any) -> Any:
    start = getattr(reader, "inspection_start", None)
    return start() if start else reader.initialOffset()


def inspect_batches(
    pipeline: PipelineConfig, state: PipelineState, first: int, last: int
) -> list[InspectedBatch]:
    """Batches ``first..last`` (inclusive), each checked against the log before anything is read."""
    log = OffsetLog.of(state)
    held = log.batch_ids()
    if not held:
        raise OffsetLogError(f"no offset log yet in {log.checkpoint_dir}: run the pipeline first")
    if first > last:
        raise OffsetLogError(f"--from-batch {first} is after --to-batch {last}")
    missing = [b for b in range(first, last + 1) if b not in held]
    if missing:
        raise OffsetLogError(
            f"batch {missing[0]} is not in the offset log of {log.checkpoint_dir} "
            f"(it holds batches {held[0]}..{held[-1]})"
        )
    with _stream_readers(pipeline) as readers:
        return [_inspect(pipeline, state, readers, b) for b in range(first, last + 1)]
