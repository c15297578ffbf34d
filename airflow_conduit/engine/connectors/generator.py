"""``builtin:generator``: deterministic records, as many or as fast as configured.

Record ``i`` (0-based) is a pure function of ``(seed, i)``, so a replayed micro-batch yields exactly the
records it yielded the first time. Its key and position are ``i`` as text, which makes order and
duplicates easy to check downstream.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
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
from airflow_conduit.errors import Code, FatalError
from airflow_conduit.record import SOURCE_SCHEMA

if TYPE_CHECKING:  # the module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings import GeneratorSettings

ROWS_PER_PARTITION = 50_000
_MASK = (1 << 64) - 1
_COLLECTION_SALT = 0x5851F42D4C957F2D
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


Collection = tuple[str, tuple[str, ...], str, tuple[tuple[str, str], ...], str]
"""One collection as the reader gets it: (name, operations, format type, (field, type) pairs, the
contents of a ``file`` format's file in base64)."""


@dataclass(frozen=True)
class GeneratorSpec:
    record_count: int
    rate: float
    collections: tuple[Collection, ...]
    round_robin: bool
    seed: int
    max_records_per_batch: int
    burst_sleep: float = 0.0
    burst_generate: float = 1.0

    @classmethod
    def from_settings(cls, settings: GeneratorSettings) -> GeneratorSpec:
        """On the driver: the validated settings (lists already normalised to ``a,b``). A ``file``
        format's file is read here, once (as Conduit reads it once when the source opens)."""
        collections = []
        for name, config in settings.collection_configs():
            contents = ""
            if config.format_type == "file":
                try:
                    with open(config.file_path, "rb") as file:
                        contents = base64.b64encode(file.read()).decode()
                except OSError as error:
                    raise FatalError(
                        f"format.options.path: cannot read {config.file_path!r}: {error}",
                        code=Code.INVALID_CONFIG,
                    ) from None
            operations = tuple(op for op in config.operations.split(",") if op)
            fields = tuple(sorted(config.fields.items()))
            collections.append((name, operations, config.format_type, fields, contents))
        return cls(
            record_count=settings.record_count,
            rate=settings.rate,
            collections=tuple(collections),
            round_robin=settings.round_robin,
            seed=settings.seed,
            max_records_per_batch=settings.max_records_per_batch,
            burst_sleep=settings.burst_sleep_time,
            burst_generate=settings.burst_generate_time,
        )

    @cached_property
    def _files(self) -> tuple[bytes, ...]:
        return tuple(base64.b64decode(collection[4]) for collection in self.collections)

    def payload(self, i: int, fields: tuple[tuple[str, str], ...], salt: int = 0) -> dict[str, Any]:
        base = _mix((self.seed << 32) ^ i ^ (salt << 56))
        return {name: _field_value(kind, _mix(base + n)) for n, (name, kind) in enumerate(fields)}

    def collection_of(self, i: int) -> int:
        """Which collection record ``i`` belongs to: in turn (the list form), else one at random, each
        as likely, as Conduit's generator picks one per record."""
        count = len(self.collections)
        if self.round_robin or count == 1:
            return i % count
        return _mix(self.seed ^ _COLLECTION_SALT ^ (i * 0xD1B54A32D192ED03 & _MASK)) % count

    def row(self, i: int) -> tuple:
        c = self.collection_of(i)
        name, operations, kind, fields, _ = self.collections[c]
        h = _mix(self.seed ^ (i * 0x9E3779B97F4A7C15 & _MASK))
        operation = operations[h % len(operations)]
        metadata = {"opencdc.collection": name} if name else {}
        ident = str(i).encode()
        has_before, has_after = operation in ("update", "delete"), operation != "delete"
        if kind == "file":  # Conduit: the file's bytes, raw, as the before and/or after the operation implies
            data = self._files[c]
            raw_before, raw_after = (data if has_before else None), (data if has_after else None)
        else:
            before = json.dumps(self.payload(i, fields, salt=1)) if has_before else None
            after = json.dumps(self.payload(i, fields)) if has_after else None
            if kind == "structured":
                return (ident, operation, metadata, None, ident, before, None, after, None)
            raw_before, raw_after = (before.encode() if before else None), (after.encode() if after else None)
        return (ident, operation, metadata, None, ident, None, raw_before, None, raw_after)


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

    @property
    def _paced(self) -> bool:
        return self.spec.rate > 0 or self.spec.burst_sleep > 0

    def _generating_time(self, elapsed: float) -> float:
        """Of ``elapsed`` seconds, those spent generating: all, or with bursts ``burst.generateTime`` of
        each cycle of generateTime + sleepTime (Conduit's generator opens with a burst)."""
        spec = self.spec
        if spec.burst_sleep <= 0:
            return elapsed
        cycles, into = divmod(elapsed, spec.burst_generate + spec.burst_sleep)
        return cycles * spec.burst_generate + min(into, spec.burst_generate)

    def _available(self, done: int) -> int:
        """How many records exist by now: all of recordCount, or as many as the rate allowed while
        generating; without a rate, a burst admits a micro-batch and a sleep nothing."""
        spec = self.spec
        ceiling = spec.record_count if spec.record_count >= 0 else None
        if not self._paced:
            return ceiling if ceiling is not None else done + spec.max_records_per_batch
        if self._clock_start is None:
            self._clock_start = (time.monotonic(), done)
        started, base = self._clock_start
        elapsed = time.monotonic() - started
        if spec.rate > 0:
            by_time = base + int(self._generating_time(elapsed) * spec.rate)
        else:
            cycle = spec.burst_generate + spec.burst_sleep
            sleeping = elapsed % cycle >= spec.burst_generate
            by_time = done if sleeping else done + spec.max_records_per_batch
        return by_time if ceiling is None else min(ceiling, by_time)

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
            if self._paced and end > done:
                end = min(end, self._await_pace(done))
        else:
            end = self._available(done)
        if isinstance(limit, ReadMaxRows):
            end = min(end, done + limit.max_rows)
        return {"records": max(done, end)}

    def _await_pace(self, done: int) -> int:
        """Under AvailableNow an offset that did not move ends the run: wait until the rate (or the end
        of a burst's sleep) allows another record, or a stop is requested."""
        step = min(0.1, 1 / self.spec.rate) if self.spec.rate > 0 else 0.05
        while True:
            available = self._available(done)
            if available > done or stop_requested(self.stop_file):
                return available
            time.sleep(step)

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
