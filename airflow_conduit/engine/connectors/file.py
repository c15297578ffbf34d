"""``builtin:file``: a source of lines and a destination of OpenCDC JSON-lines files.

Source: ``path`` is a file or a directory (its files whose names do not start with ``_`` or ``.``, in
name order). Each complete line is a record with raw ``.Payload.After``; its position is
``FILE:BYTE_OFFSET``. The offset per file lives in Spark's offset log, so in continuous mode new files
and appended lines are picked up, and a partial last line waits for its newline.

Destination: each micro-batch becomes ``BATCH-PART.jsonl`` files under ``path``, named so they sort in
delivery order. They are written under ``_tmp-BATCH/`` first and renamed into place, so a reader of
``*.jsonl`` never sees a half-written file, and a replayed batch replaces its own files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_conduit.engine.connectors._stream import (
    SourceContext,
    parse_options,
    read_python_source,
    stop_requested,
)
from airflow_conduit.record import SOURCE_SCHEMA, opencdc_json_sql

SCAN_CHUNK = 8 << 20
PARTITION_BYTES = 16 << 20
ARROW_ROWS = 20_000


def is_visible(name: str) -> bool:
    """In-progress files and bookkeeping start with ``_`` or ``.``: never read them."""
    return not name.startswith(("_", "."))


def list_source_files(path: str) -> dict[str, str]:
    """``{name: full path}`` of the files a source reads, in name order."""
    if os.path.isdir(path):
        return {
            name: os.path.join(path, name)
            for name in sorted(os.listdir(path))
            if is_visible(name) and os.path.isfile(os.path.join(path, name))
        }
    if os.path.isfile(path):
        return {os.path.basename(path): path}
    return {}


def scan_lines(path: str, start: int, stop: int, budget: int) -> tuple[int, int]:
    """From ``start``, the offset after at most ``budget`` complete lines ending before ``stop``."""
    offset, lines = start, 0
    with open(path, "rb") as fh:
        fh.seek(start)
        position = start
        while position < stop and lines < budget:
            chunk = fh.read(min(SCAN_CHUNK, stop - position))
            if not chunk:
                break
            found = chunk.count(b"\n")
            if lines + found <= budget:
                lines += found
                if found:
                    offset = position + chunk.rfind(b"\n") + 1
            else:
                cut = -1
                for _ in range(budget - lines):
                    cut = chunk.index(b"\n", cut + 1)
                offset, lines = position + cut + 1, budget
            position += len(chunk)
    return offset, lines


def split_range(path: str, start: int, end: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into pieces of about ``PARTITION_BYTES`` at line boundaries."""
    pieces, cursor = [], start
    with open(path, "rb") as fh:
        while end - cursor > PARTITION_BYTES:
            fh.seek(cursor + PARTITION_BYTES)
            tail = fh.read(end - cursor - PARTITION_BYTES)
            newline = tail.find(b"\n")
            if newline < 0:
                break
            cut = cursor + PARTITION_BYTES + newline + 1
            if cut >= end:
                break
            pieces.append((cursor, cut))
            cursor = cut
    pieces.append((cursor, end))
    return pieces


@dataclass(frozen=True)
class _FileRange(InputPartition):
    name: str
    path: str
    start: int
    end: int


class FileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        settings, self.stop_file, self.node = parse_options(options)
        self.path = str(settings["path"])
        self.max_records = int(settings["maxRecordsPerBatch"])
        self._target: dict[str, int] | None = None  # file sizes when an AvailableNow run began

    def initialOffset(self) -> dict:
        return {"files": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {name: os.path.getsize(full) for name, full in list_source_files(self.path).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if stop_requested(self.stop_file):
            return start
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else float("inf")
        ends = dict(start["files"])
        for name, full in list_source_files(self.path).items():
            if budget <= 0:
                break
            size = os.path.getsize(full)
            if self._target is not None:
                size = min(size, self._target.get(name, 0))
            done = ends.get(name, 0)
            if size <= done:
                continue
            ends[name], lines = scan_lines(full, done, size, budget)
            budget -= lines
        return {"files": ends}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        files = list_source_files(self.path)
        ranges = []
        for name in sorted(end["files"]):
            first, last = start["files"].get(name, 0), end["files"][name]
            if last > first:
                full = files.get(name, os.path.join(self.path, name) if os.path.isdir(self.path) else self.path)
                ranges += [_FileRange(name, full, a, b) for a, b in split_range(full, first, last)]
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _FileRange)
        with open(partition.path, "rb") as fh:
            fh.seek(partition.start)
            data = fh.read(partition.end - partition.start)
        lines = data.split(b"\n")
        lines.pop()  # the range ends just after a newline
        offset = partition.start
        prefix = f"{partition.name}:"
        for first in range(0, len(lines), ARROW_ROWS):
            chunk = lines[first : first + ARROW_ROWS]
            positions = []
            for line in chunk:
                positions.append(f"{prefix}{offset}".encode())
                offset += len(line) + 1
            payload = [line[:-1] if line.endswith(b"\r") else line for line in chunk]
            yield _batch(positions, payload)

    def commit(self, end: dict) -> None:
        """Files are not consumed: the offsets in Spark's log are the whole position."""


_ARROW_SCHEMA = pa.schema(
    [
        ("position", pa.binary()),
        ("operation", pa.string()),
        ("metadata", pa.map_(pa.string(), pa.string())),
        ("key_json", pa.string()),
        ("key_raw", pa.binary()),
        ("before_json", pa.string()),
        ("before_raw", pa.binary()),
        ("after_json", pa.string()),
        ("after_raw", pa.binary()),
    ]
)


def _batch(positions: list[bytes], payload: list[bytes]) -> pa.RecordBatch:
    n = len(positions)
    columns = [
        pa.array(positions, pa.binary()),
        pa.array(["create"] * n, pa.string()),
        pa.nulls(n, pa.map_(pa.string(), pa.string())),
        pa.nulls(n, pa.string()),
        pa.nulls(n, pa.binary()),
        pa.nulls(n, pa.string()),
        pa.nulls(n, pa.binary()),
        pa.nulls(n, pa.string()),
        pa.array(payload, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=_ARROW_SCHEMA)


class FileDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_file"

    def schema(self) -> str:
        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return FileStreamReader(dict(self.options))


def read_stream(spark: SparkSession, settings: dict[str, Any], ctx: SourceContext) -> DataFrame:
    return read_python_source(spark, FileDataSource, settings, ctx)


# destination -------------------------------------------------------------------------------------


def write_jsonl(records: DataFrame, directory: str | Path, batch_id: int) -> list[Path]:
    """Write ``records`` as OpenCDC JSON lines into ``directory``; returns the files, in order."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / f"_tmp-{batch_id:012d}"
    shutil.rmtree(staging, ignore_errors=True)
    records.selectExpr(f"{opencdc_json_sql()} AS value").write.text(str(staging))
    parts = sorted(p for p in staging.iterdir() if p.name.startswith("part-"))
    written = []
    for part in parts:
        index = int(part.name.split("-")[1])
        target = directory / f"{batch_id:012d}-{index:05d}.jsonl"
        os.replace(part, target)
        written.append(target)
    shutil.rmtree(staging, ignore_errors=True)
    return written


def write_batch(records: DataFrame, settings: dict[str, Any], batch_id: int) -> None:
    write_jsonl(records, settings["path"], batch_id)
