"""``builtin:file``: a source of lines and a destination of OpenCDC JSON-lines files.

Source: ``path`` is a file or a directory (its files whose names do not start with ``_`` or ``.``, in
name order). Each complete line is a ``create`` record as Conduit's file source makes it: raw
``.Payload.After`` (the line), raw ``.Key`` (its line number in its file, from 1) and ``file.path``
metadata (the configured path; for a directory, the file's path under it). Its position is
``FILE:BYTE_OFFSET`` (Conduit's is the offset alone; the file name keeps a directory's positions
unique, and ``airflow-conduit ack`` names records by it). The offset and the line count per file live
in Spark's offset log, so in continuous mode new files and appended lines are picked up, and a partial
last line waits for its newline.

Destination: see :func:`layout`. A directory gets ``GENERATION-BATCH-PART.jsonl`` files named so they
sort in delivery order (:mod:`.jsonl_files`); a file gets the batches appended (:mod:`.jsonl_file`);
either is published exactly once with a delivery marker.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from airflow_conduit.batch_log import SourceLag
from airflow_conduit.engine.arrow_arrays import int_array, string_array
from airflow_conduit.engine.connectors import Staged, jsonl_file, jsonl_files
from airflow_conduit.engine.connectors._stream import (
    Delivery,
    SourceContext,
    parse_options,
    read_python_source,
    source_options,
    stop_requested,
)
from airflow_conduit.engine.connectors.jsonl_files import stage_jsonl
from airflow_conduit.record import ORDER_COLUMNS, source_schema

if TYPE_CHECKING:  # the module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings import FileDestinationSettings, FileSourceSettings

SCAN_CHUNK = 8 << 20
MIN_PARTITION_BYTES = 1 << 20
MAX_PARTITION_BYTES = 8 << 20
ARROW_ROWS = 20_000
READ_BYTES = 4 << 20

logger = logging.getLogger("airflow_conduit.engine")

META_FILE_PATH = "file.path"
"""Conduit's file source metadata: the file a record's line comes from."""


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


def _newlines(chunk: bytes) -> int:
    """The newlines in ``chunk``: numpy's vector compare, 4× the speed of ``bytes.count`` (0.6 against
    2.4 ms per 8 MB here); each micro-batch counts the lines of its bytes once or twice."""
    return int(np.count_nonzero(np.frombuffer(chunk, np.uint8) == 10))


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
            found = _newlines(chunk)
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


def count_lines(path: str, start: int, stop: int) -> int:
    """The newlines in ``[start, stop)`` of ``path``."""
    lines = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        while start < stop:
            chunk = fh.read(min(SCAN_CHUNK, stop - start))
            if not chunk:
                break
            lines += _newlines(chunk)
            start += len(chunk)
    return lines


def split_range(path: str, start: int, end: int, piece: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` at line boundaries into pieces of equal size, as many as ``piece`` bytes
    each makes, rounded (at least one). Not pieces of ``piece`` bytes and a remainder: a file a little
    over ``piece`` would give a second task of a few lines, which costs a task's fixed 0.1 s (measured:
    8.5 MB files under an 8 MB piece gave 8 tasks of 1,660 records beside 8 of 123,000)."""
    count = max(1, int((end - start) / piece + 0.5))
    pieces, cursor = [], start
    with open(path, "rb") as fh:
        for k in range(1, count):
            target = max(cursor, start + (end - start) * k // count)
            fh.seek(target)
            newline = fh.read(min(end - target, 1 << 20)).find(b"\n")
            if newline < 0:
                break
            cut = target + newline + 1
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
    first_line: int
    """The line number (from 1) of the line at ``start``: Conduit's record key."""
    shown_path: str
    """``file.path`` metadata."""


@dataclass(frozen=True)
class FileSource:
    """What the stream reader needs of the source's settings (see ``_stream.source_options``)."""

    path: str
    max_records: int

    @classmethod
    def from_settings(cls, settings: FileSourceSettings) -> FileSource:
        return cls(settings.path, settings.max_records_per_batch)


class FileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        parsed = parse_options(options, FileSource)
        self.stop_file, self.parallelism = parsed.stop_file, parsed.parallelism
        self.path = parsed.config.path
        self.max_records = parsed.config.max_records
        self._target: dict[str, int] | None = None  # file sizes when an AvailableNow run began

    def initialOffset(self) -> dict:
        # files: byte offset read up to; lines: the lines before it (keys continue from there)
        return {"files": {}, "lines": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {name: os.path.getsize(full) for name, full in list_source_files(self.path).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if stop_requested(self.stop_file):
            return start
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else sys.maxsize  # no limit
        ends, counts = dict(start["files"]), self._line_counts(start)
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
            counts[name] = counts.get(name, 0) + lines
            budget -= lines
        return {"files": ends, "lines": counts}

    def _line_counts(self, offset: dict) -> dict[str, int]:
        """The lines before each file's offset. An offset logged before keys were line numbers has
        none: they are counted once from the file (the same count on every replay)."""
        counts = dict(offset.get("lines") or {})
        files = list_source_files(self.path)
        for name, done in offset["files"].items():
            if name not in counts:
                full = files.get(name)
                counts[name] = count_lines(full, 0, done) if full and done else 0
        return counts

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        files = list_source_files(self.path)
        spans = {name: (start["files"].get(name, 0), last) for name, last in end["files"].items()}
        spans = {name: span for name, span in spans.items() if span[1] > span[0]}
        # Enough pieces to keep every core busy, in file and offset order (= source order): whole waves
        # of one piece per core (at least two), each piece at most MAX_PARTITION_BYTES. 9 pieces on 2
        # cores left one core idle through the last piece's task.
        total = sum(last - first for first, last in spans.values())
        waves = max(2, math.ceil(total / (MAX_PARTITION_BYTES * self.parallelism)))
        piece = max(MIN_PARTITION_BYTES, total // (waves * self.parallelism) + 1)
        counts = self._line_counts(start)
        ranges = []
        for name in sorted(spans):
            first, last = spans[name]
            full = files.get(name, os.path.join(self.path, name) if os.path.isdir(self.path) else self.path)
            # Conduit's file.path is the configured path; a directory's file is named under it.
            shown = os.path.join(self.path, name) if os.path.isdir(self.path) else self.path
            line = counts.get(name, 0) + 1
            for a, b in split_range(full, first, last, piece):
                ranges.append(_FileRange(name, full, a, b, line, shown))
                if b < last:  # the next piece's first line: one more pass over this piece's bytes
                    line += count_lines(full, a, b)
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's lines, read in blocks of :data:`READ_BYTES` (a worker's memory stays the same
        whatever the size of the range, which grows with the batch)."""
        assert isinstance(partition, _FileRange)
        base, line, left = partition.start, partition.first_line, partition.end - partition.start
        pending = b""  # the start of a line that continues in the next block
        with open(partition.path, "rb") as fh:
            fh.seek(partition.start)
            while left > 0:
                block = fh.read(min(READ_BYTES, left))
                if not block:
                    break
                left -= len(block)
                data = pending + block if pending else block
                cut = data.rfind(b"\n") + 1
                pending = data[cut:]
                if cut:
                    lines = data[:cut]
                    yield from lines_to_batches(lines, partition.name, base, line, partition.shown_path)
                    base, line = base + cut, line + lines.count(b"\n")

    def commit(self, end: dict) -> None:
        """Files are not consumed: the offsets in Spark's log are the whole position."""


SCHEMA = source_schema("position", "metadata", "key_raw", "after_raw")
"""What the file source yields: the rest of a record is the engine's default (a ``create``)."""
_ARROW_SCHEMA = pa.schema(
    [
        ("position", pa.binary()),
        ("metadata", pa.map_(pa.string(), pa.string())),
        ("key_raw", pa.binary()),
        ("after_raw", pa.binary()),
    ]
)


def lines_to_batches(
    data: bytes, name: str, base: int, first_line: int = 1, shown_path: str = ""
) -> Iterator[pa.RecordBatch]:
    """The complete lines of ``data`` (which starts at byte ``base`` of file ``name``, at line number
    ``first_line``) as records, split with numpy and Arrow kernels: no Python per line."""
    import pyarrow.compute as pc  # in the reading worker only, not Spark's planning processes (20 ms)

    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw == 10)  # each line's newline
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    prefix, no_separator = string_array([f"{name}:", ""])  # each position is "NAME:OFFSET"
    for first in range(0, len(ends), ARROW_ROWS):
        line_starts, line_ends = starts[first : first + ARROW_ROWS], ends[first : first + ARROW_ROWS]
        offset = int(line_starts[0])
        # Each value spans its line and the newline (Arrow values are contiguous); slice the newline off.
        offsets = int_array(np.append(line_starts, line_ends[-1] + 1) - offset, np.int32)
        values = pa.py_buffer(data[offset : int(line_ends[-1]) + 1])
        with_newline = pa.BinaryArray.from_buffers(
            pa.binary(), len(line_starts), [None, offsets.buffers()[1], values]
        )
        payload = _without_line_end(with_newline)
        positions = pc.binary_join_element_wise(
            prefix, pc.cast(int_array(line_starts + base, np.int64), pa.string()), no_separator
        ).cast(pa.binary())
        numbers = np.arange(first_line + first, first_line + first + len(line_starts), dtype=np.int64)
        keys = pc.cast(pc.cast(int_array(numbers, np.int64), pa.string()), pa.binary())
        yield pa.RecordBatch.from_arrays(
            [positions, _file_path_maps(shown_path or name, len(line_starts)), keys, payload],
            schema=_ARROW_SCHEMA,
        )


def _file_path_maps(path: str, rows: int) -> pa.MapArray:
    """``{file.path: path}`` for ``rows`` records, built by Arrow kernels."""
    same = int_array(np.zeros(rows), np.int32)
    keys = string_array([META_FILE_PATH]).take(same)
    values = string_array([path]).take(same)
    return pa.MapArray.from_arrays(int_array(np.arange(rows + 1), np.int32), keys, values)


def _without_line_end(values: pa.BinaryArray) -> pa.Array:
    """Each value without its newline, and without a carriage return before it (Arrow kernels)."""
    import pyarrow.compute as pc

    cut = pc.binary_slice(values, 0, -1)
    carriage_return = pc.ends_with(cut, pattern="\r")
    if pc.any(carriage_return).as_py():
        cut = pc.if_else(carriage_return, pc.binary_slice(cut, 0, -1), cut)
    return cut


class _OffsetsOnlyReader(FileStreamReader):
    """The stream reader Spark runs: the stream's offsets, and no rows. The engine reads each micro-batch
    itself from the offsets in Spark's log (:func:`read_batch`) and takes none of the stream's rows of
    this source (:func:`airflow_conduit.engine.intake.read_sources` filters them out where another
    source shares the stream, and leaves the stream unread where none does). So the micro-batch is not
    cut at line boundaries for Spark (a pass over its bytes, about 40 ms per 68 MB, in the stream's
    Python process every batch), and a pipeline that also has a source Spark reads does not read the
    files twice."""

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return iter(())


class FileDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_file"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _OffsetsOnlyReader(dict(self.options))


def read_stream(spark: SparkSession, settings: FileSourceSettings, ctx: SourceContext) -> DataFrame:
    if not os.path.exists(settings.path):
        # Not an error (the files may come later), but a run that reads nothing should say why.
        logger.warning(
            "source %s: %s does not exist (yet): nothing to read until it does",
            ctx.node_id,
            os.path.abspath(settings.path),
        )
    return read_python_source(spark, FileDataSource, FileSource.from_settings(settings), ctx, SCHEMA)


RANGES_CLASS = "org.airflowconduit.ConduitFunctions$FileRanges"
_RANGE_ROWS_JSON = StructType(
    [
        StructField("r", IntegerType()),
        StructField("position", BinaryType()),
        StructField("key_raw", BinaryType()),
        StructField("after_raw", BinaryType()),
    ]
).json()
"""The rows of a micro-batch's byte ranges, as Spark's JSON of their schema: made without the JVM (from
DDL, a dozen Py4J calls every micro-batch)."""


def read_batch(
    spark: SparkSession,
    settings: FileSourceSettings,
    ctx: SourceContext,
    start: Any,
    end: Any,
    metadata: Mapping[str, str] | None = None,
) -> DataFrame:
    """The records between two of the stream's offsets (a micro-batch's, from Spark's offset log), read
    by the engine's Java reader (``FileRanges`` in ``engine/java``) from the ranges the stream reader
    plans: the same rows as :meth:`FileStreamReader.read`, without Spark's Python data source, whose
    Arrow round trip cost about 0.6 s of a 1M-record batch of 3 s (measured as batch jobs, 4 rounds:
    2.36 against 2.98 s).

    :param metadata: entries every record's metadata gets after its ``file.path`` (the engine's
        standard ones). Each range's map is one constant that Spark picks per row, where building
        the map per record (and merging the standard entries into it) took about a tenth of a
        pipeline's task time (JFR, 10M records).
    """
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    from airflow_conduit.config.fieldref import sql_string_map
    from airflow_conduit.engine.frames import select_sql
    from airflow_conduit.engine.sql_functions import function_instance

    ranges = [r for r in stream_reader(settings, ctx).partitions(start, end) if isinstance(r, _FileRange)]
    if not ranges:
        return spark.createDataFrame([], SCHEMA)
    context: Any = spark.sparkContext
    # The reader writes each position as "NAME:OFFSET" from the name's bytes (as hex: a name may hold a tab).
    specs = [
        f"{i}\t{r.start}\t{r.end}\t{r.first_line}\t{f'{r.name}:'.encode().hex()}\t{r.path}"
        for i, r in enumerate(ranges)
    ]
    lines = context._jsc.parallelize(specs, len(specs)).flatMap(function_instance(spark, RANGES_CLASS))
    jschema = spark._jsparkSession.parseDataType(_RANGE_ROWS_JSON)
    rows = ClassicDataFrame(spark._jsparkSession.internalCreateDataFrame(lines.rdd(), jschema, False), spark)

    def per_range(values: list[str]) -> str:
        return f"element_at(array({', '.join(values)}), r + 1)"

    def metadata_map(path: str) -> str:
        return sql_string_map({META_FILE_PATH: path, **(metadata or {})})

    return select_sql(
        rows,
        [
            "position",
            f"{per_range([metadata_map(r.shown_path) for r in ranges])} AS metadata",
            "key_raw",
            "after_raw",
        ],
    )


def records_between(start: Any, end: Any) -> int:
    """How many records (lines) lie between two of the stream's offsets: each holds the lines before
    each file's byte offset."""
    before = start.get("lines") or {}
    return sum(int(lines) - int(before.get(name, 0)) for name, lines in (end.get("lines") or {}).items())


def stream_reader(settings: FileSourceSettings, ctx: SourceContext) -> FileStreamReader:
    """The stream reader as Spark builds it, for ``inspect`` in plain Python."""
    return FileStreamReader(source_options(FileSource.from_settings(settings), ctx))


class FileLag:
    """Bytes of the source's files not yet read at a batch's end offset: each visible file's size
    less its offset (a file not in the offset yet counts whole; a partial last line counts too). One
    directory listing and one stat per file, on the driver."""

    def __init__(self, path: str) -> None:
        self.path = path

    def lag(self, end: Any) -> SourceLag | None:
        read = end.get("files", {}) if isinstance(end, dict) else {}
        behind = 0
        for name, full in list_source_files(self.path).items():
            try:
                size = os.path.getsize(full)
            except FileNotFoundError:  # removed since the listing
                continue
            behind += max(0, size - int(read.get(name, 0)))
        return SourceLag(float(behind), "bytes")

    def close(self) -> None:
        pass


def lag_reader(settings: FileSourceSettings, ctx: SourceContext) -> FileLag:
    return FileLag(settings.path)


# destination -------------------------------------------------------------------------------------


def stage(records: DataFrame, settings: FileDestinationSettings, delivery: Delivery) -> Staged:
    chosen = jsonl_file.layout(settings.path)
    jsonl_file.announce(settings.path, chosen, f"{delivery.pipeline_id}:{delivery.destination_id}")
    from airflow_conduit.engine.frames import drop_columns  # the driver's: workers import this module

    lines = drop_columns(records, ORDER_COLUMNS)
    if chosen == "file":
        return jsonl_file.stage_append(lines, settings.path, delivery, settings.output_format)
    return stage_jsonl(lines, settings.path, delivery, settings.output_format)


def delivered(settings: FileDestinationSettings, delivery: Delivery) -> bool:
    if jsonl_file.layout(settings.path) == "file":
        return jsonl_file.delivered(settings.path, delivery)
    return jsonl_files.delivered(settings.path, delivery)
