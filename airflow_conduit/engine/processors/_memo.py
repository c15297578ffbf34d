"""A Python mapper's output kept for the rest of its batch attempt, in local mode.

A batch whose processors call user code (``custom.python``, ``custom.javascript``, ``webhook.http``, a
template that draws random values) must be decided once: every action on its records (the destination's
write, then the nacked records for the DLQ, a stop's error) must see the same rows. Without this module
the engine stores the rows after the processors (engine/once.py): about 550 bytes a record in the
driver's heap, which bounds the batch at 250,000 records and costs its collections.

In local mode every Python worker runs on the driver's machine, so the mapper can keep what it yielded
instead: the first evaluation of a partition writes its output batches to a file (Arrow IPC) as it
yields them, and a later evaluation in the same batch attempt reads them back and never calls the
function. The batch (engine/batch.py) makes a fresh directory per attempt and builds the attempt's plan
inside :func:`keeping_output`, so each mapper carries its directory; a crashed attempt's directory is
never read (a replay from the offset log is a new attempt, which calls the function again, as with
stored rows). Once the batch's first pass is done, the batch writes :data:`SEALED` in the directory: a
partition evaluated after that without its file fails the action rather than call the function again.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

SEALED = "sealed"
"""Written in the directory once the batch's first pass has evaluated every partition."""

Mapper = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


class MemoLost(RuntimeError):
    """A partition's kept output is missing (or was kept for other rows) after the first pass."""


@dataclass
class _Planning:
    directory: str
    mappers: Iterator[int] = field(default_factory=itertools.count)
    """Numbers the mappers planned in the block: one processor may plan two (a template evaluated in
    Python, then its own mapper)."""


_PLANNING: ContextVar[_Planning | None] = ContextVar("mapper_memo_planning", default=None)


@contextmanager
def keeping_output(directory: Path | None) -> Iterator[None]:
    """Mappers planned inside the block keep their output in ``directory`` (``None``: they do not)."""
    token = _PLANNING.set(_Planning(str(directory)) if directory is not None else None)
    try:
        yield
    finally:
        _PLANNING.reset(token)


_ANALYSING: ContextVar[bool] = ContextVar("mapper_memo_analysing", default=False)


@contextmanager
def analysing() -> Iterator[None]:
    """Mappers planned inside the block count as deterministic in Spark's plan, as keeping their output
    makes them within a batch attempt: the block asks whether the rest of a processor's plan is."""
    token = _ANALYSING.set(True)
    try:
        yield
    finally:
        _ANALYSING.reset(token)


def planned_deterministic() -> bool:
    """Whether a mapper planned now is marked deterministic (see :func:`analysing`). Outside it, each
    is marked non-deterministic: Spark's optimizer then pushes no filter below it and inlines no
    expression through it, as it would not through ``mapInArrow`` (a chain of three Python processors
    with conditions grew its plan until the driver spent minutes in garbage collection)."""
    return _ANALYSING.get()


def memoized(mapper: Mapper, node_id: str) -> Mapper:
    """``mapper``, evaluated once per partition of the batch attempt and replayed after, when it is
    planned inside :func:`keeping_output`; else ``mapper`` itself."""
    planning = _PLANNING.get()
    if planning is None:
        return mapper
    directory, number = planning.directory, next(planning.mappers)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None, "a mapper runs in a Spark task"
        # The partition is named by its first record's _seq, which holds the partition's index where
        # the records were numbered: a task's own index is not it when a later step coalesces
        # partitions (one task then evaluates several).
        skipped: list[pa.RecordBatch] = []
        for batch in batches:
            skipped.append(batch)
            if batch.num_rows:
                break
        else:  # no rows: nothing for the function to decide
            yield from mapper(iter(skipped))
            return
        batches = itertools.chain(skipped, batches)
        name = f"{_file_name(node_id)}-{number}-{seq_of(skipped[-1], 0)}"
        kept, rows = Path(directory) / f"{name}.arrow", Path(directory) / f"{name}.json"
        if kept.exists():
            yield from _replay(batches, kept, rows)
        elif (Path(directory) / SEALED).exists():
            raise MemoLost(f"{kept}: the output of {node_id!r} for these records is gone")
        else:
            counts = _RowCount()
            yield from _first(mapper(_counted(batches, counts)), kept, rows, counts, task.attemptNumber())

    return run


def seq_of(batch: pa.RecordBatch, row: int) -> int:
    """The ``_seq`` of a row of a mapper's batch."""
    return batch.column("_seq")[row].as_py()


class _RowCount:
    """The input rows a partition's first evaluation read: (rows, first ``_seq``, last ``_seq``)."""

    def __init__(self) -> None:
        self.rows = 0
        self.first: int | None = None
        self.last: int | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            if self.first is None:
                self.first = seq_of(batch, 0)
            self.last = seq_of(batch, batch.num_rows - 1)
            self.rows += batch.num_rows

    def as_json(self) -> str:
        return json.dumps([self.rows, self.first, self.last])


def _counted(batches: Iterator[pa.RecordBatch], counts: _RowCount) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        counts.add(batch)
        yield batch


def _first(
    outputs: Iterator[pa.RecordBatch], kept: Path, rows: Path, counts: _RowCount, attempt: int
) -> Iterator[pa.RecordBatch]:
    """Yield the mapper's batches and write them as they go; the file counts once it is renamed into
    place, after the input is read to its end."""
    temporary = kept.with_name(f"{kept.name}.{attempt}.{os.getpid()}.tmp")
    writer: pa.ipc.RecordBatchStreamWriter | None = None
    try:
        for batch in outputs:
            if writer is None:
                writer = pa.ipc.new_stream(str(temporary), batch.schema)
            writer.write_batch(batch)
            yield batch
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        temporary.write_bytes(b"")  # no rows: an empty file
    rows.write_text(counts.as_json())
    os.replace(temporary, kept)


def _replay(batches: Iterator[pa.RecordBatch], kept: Path, rows: Path) -> Iterator[pa.RecordBatch]:
    """The first evaluation's output, after checking that the input is the same rows."""
    counts = _RowCount()
    for batch in batches:  # Spark sends the partition's rows again: read them to their end
        counts.add(batch)
    if counts.as_json() != rows.read_text():
        raise MemoLost(
            f"{kept}: kept for {rows.read_text()} (rows, first and last _seq), not for {counts.as_json()}"
        )
    if kept.stat().st_size == 0:
        return
    with pa.memory_map(str(kept)) as source:
        yield from pa.ipc.open_stream(source)


def _file_name(node_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in node_id)
