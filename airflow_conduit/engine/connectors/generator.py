"""``builtin:generator``: deterministic records, as many or as fast as configured.

Record ``i`` (0-based) is a pure function of ``(seed, i)``, so a replayed micro-batch yields exactly the
records it yielded the first time. Its key and position are ``i`` as text, which makes order and
duplicates easy to check downstream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_conduit.engine.connectors._stream import (
    SourceContext,
    parse_options,
    read_python_source,
    source_options,
    stop_requested,
)
from airflow_conduit.record import SOURCE_SCHEMA

if TYPE_CHECKING:  # the module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings import GeneratorSettings

ROWS_PER_PARTITION = 50_000
_MASK = (1 << 64) - 1
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")
_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z


def _mix(value: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread hash of an integer."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


def _field_value(kind: str, h: int) -> Any:
    if kind == "int":
        return h % 1_000_000
    if kind == "bool":
        return bool(h & 1)
    if kind == "time":
        return datetime.fromtimestamp(_EPOCH + h % 31_536_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "duration":
        return f"{h % 86_400}s"
    return f"{_WORDS[h % len(_WORDS)]}-{h % 10_000}"


@dataclass(frozen=True)
class GeneratorSpec:
    record_count: int
    rate: float
    collections: tuple[str, ...]
    operations: tuple[str, ...]
    structured: bool
    fields: tuple[tuple[str, str], ...]
    seed: int
    max_records_per_batch: int

    @classmethod
    def from_settings(cls, settings: GeneratorSettings) -> GeneratorSpec:
        """On the driver: the validated settings (lists already normalised to ``a,b``)."""

        def split(text: str) -> tuple[str, ...]:
            return tuple(part for part in text.split(",") if part)

        return cls(
            record_count=settings.record_count,
            rate=settings.rate,
            collections=split(settings.collections),
            operations=split(settings.operations),
            structured=settings.format_type == "structured",
            fields=tuple(sorted(settings.format_options.items())),
            seed=settings.seed,
            max_records_per_batch=settings.max_records_per_batch,
        )

    def payload(self, i: int, salt: int = 0) -> dict[str, Any]:
        base = _mix((self.seed << 32) ^ i ^ (salt << 56))
        return {name: _field_value(kind, _mix(base + n)) for n, (name, kind) in enumerate(self.fields)}

    def row(self, i: int) -> tuple:
        h = _mix(self.seed ^ (i * 0x9E3779B97F4A7C15 & _MASK))
        operation = self.operations[h % len(self.operations)]
        metadata = (
            {"opencdc.collection": self.collections[i % len(self.collections)]} if self.collections else {}
        )
        before = json.dumps(self.payload(i, salt=1)) if operation in ("update", "delete") else None
        after = json.dumps(self.payload(i)) if operation != "delete" else None
        ident = str(i).encode()
        if self.structured:
            return (ident, operation, metadata, None, ident, before, None, after, None)
        return (
            ident,
            operation,
            metadata,
            None,
            ident,
            None,
            before.encode() if before else None,
            None,
            after.encode() if after else None,
        )


@dataclass(frozen=True)
class _Range(InputPartition):
    start: int
    end: int


class GeneratorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        parsed = parse_options(options, GeneratorSpec)
        self.stop_file = parsed.stop_file
        self.spec = parsed.config
        self._clock_start: tuple[float, int] | None = None  # (time, records) when first asked
        self._available_now = False
        self._target: int | None = None

    def initialOffset(self) -> dict:
        return {"records": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.spec.max_records_per_batch)

    def _available(self, done: int) -> int:
        spec = self.spec
        ceiling = spec.record_count if spec.record_count >= 0 else None
        if spec.rate > 0:
            if self._clock_start is None:
                self._clock_start = (time.monotonic(), done)
            started, base = self._clock_start
            by_rate = base + int((time.monotonic() - started) * spec.rate)
            return by_rate if ceiling is None else min(ceiling, by_rate)
        return ceiling if ceiling is not None else done + spec.max_records_per_batch

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        done = int(start["records"])
        if stop_requested(self.stop_file):
            return start
        if self._available_now:
            if self._target is None:
                # What an until-idle run generates: all of a finite recordCount, else one batch. The rate
                # paces it; it must not cut it short (the rate clock starts at zero records).
                spec = self.spec
                self._target = (
                    spec.record_count if spec.record_count >= 0 else done + spec.max_records_per_batch
                )
            end = self._target
            if self.spec.rate > 0 and end > done:
                end = min(end, self._await_rate(done))
        else:
            end = self._available(done)
        if isinstance(limit, ReadMaxRows):
            end = min(end, done + limit.max_rows)
        return {"records": max(done, end)}

    def _await_rate(self, done: int) -> int:
        """Under AvailableNow an offset that did not move ends the run: wait (at most 1/rate seconds)
        until the rate allows another record, or a stop is requested."""
        while True:
            available = self._available(done)
            if available > done or stop_requested(self.stop_file):
                return available
            time.sleep(min(0.1, 1 / self.spec.rate))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, last = int(start["records"]), int(end["records"])
        return [_Range(a, min(a + ROWS_PER_PARTITION, last)) for a in range(first, last, ROWS_PER_PARTITION)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, _Range)
        row = self.spec.row
        for i in range(partition.start, partition.end):
            yield row(i)

    def commit(self, end: dict) -> None:
        """Generated records need no release: the position lives in Spark's offset log."""


class GeneratorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_generator"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GeneratorStreamReader(dict(self.options))


def read_stream(spark: SparkSession, settings: GeneratorSettings, ctx: SourceContext) -> DataFrame:
    return read_python_source(spark, GeneratorDataSource, GeneratorSpec.from_settings(settings), ctx)


def stream_reader(settings: GeneratorSettings, ctx: SourceContext) -> GeneratorStreamReader:
    """The stream reader as Spark builds it, for ``inspect`` in plain Python."""
    return GeneratorStreamReader(source_options(GeneratorSpec.from_settings(settings), ctx))
