"""Spark's offset and commit logs of a pipeline's checkpoint, read in plain Python.

``STATE/PIPELINE/checkpoint/offsets/N`` is written by Spark before micro-batch ``N`` runs: line 1 is the
format version (``v1``), line 2 the batch metadata (JSON), then one JSON offset per source, in the order
of the union (the order of the pipeline's sources); ``-`` stands for a source without an offset yet.
``commits/N`` appears once batch ``N`` is committed, i.e. acked by every destination and the DLQ.

Batch ``N`` of a source covers ``(end offset of batch N-1, end offset of batch N]``; for batch 0, or a
source that had no offset before, it starts at the source's initial offset.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_conduit.state import PipelineState


class OffsetLogError(Exception):
    """The offset log cannot answer: no checkpoint yet, a batch that is not (or no longer) in the log."""


@dataclass(frozen=True)
class BatchOffsets:
    """The end offsets of one micro-batch, one per source (``None``: the source had no offset)."""

    batch_id: int
    ends: tuple[Any, ...]
    committed: bool
    metadata: dict[str, Any]


@dataclass(frozen=True)
class OffsetLog:
    """The offset log of one pipeline's checkpoint."""

    checkpoint_dir: Path

    @classmethod
    def of(cls, state: PipelineState) -> OffsetLog:
        return cls(state.checkpoint_dir)

    @property
    def offsets_dir(self) -> Path:
        return self.checkpoint_dir / "offsets"

    @property
    def commits_dir(self) -> Path:
        return self.checkpoint_dir / "commits"

    @staticmethod
    def _ids(directory: Path) -> list[int]:
        # Spark writes through hidden temporary files (.N.tmp) and renames: only bare numbers count.
        if not directory.is_dir():
            return []
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())

    def batch_ids(self) -> list[int]:
        """The batches the log holds (Spark purges old ones: by default it keeps the last 100)."""
        return self._ids(self.offsets_dir)

    def committed_ids(self) -> list[int]:
        return self._ids(self.commits_dir)

    def is_committed(self, batch_id: int) -> bool:
        return (self.commits_dir / str(batch_id)).is_file()

    def last_committed(self) -> int | None:
        committed = self.committed_ids()
        return committed[-1] if committed else None

    def read(self, batch_id: int) -> BatchOffsets:
        path = self.offsets_dir / str(batch_id)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise OffsetLogError(self._missing(batch_id)) from None
        if len(lines) < 2 or not lines[0].startswith("v"):
            raise OffsetLogError(f"{path}: not a Spark offset log entry")
        ends = tuple(None if line.strip() in ("", "-") else json.loads(line) for line in lines[2:])
        return BatchOffsets(batch_id, ends, self.is_committed(batch_id), json.loads(lines[1]))

    def _missing(self, batch_id: int) -> str:
        ids = self.batch_ids()
        if not ids:
            return f"no offset log yet in {self.checkpoint_dir}: run the pipeline first"
        return (
            f"batch {batch_id} is not in the offset log of {self.checkpoint_dir} "
            f"(it holds batches {ids[0]}..{ids[-1]})"
        )

    def ranges(self, batch_id: int, sources: int, initial: Callable[[int], Any]) -> list[tuple[Any, Any]]:
        """``(start, end)`` per source for batch ``batch_id``.

        :param sources: how many sources the pipeline has now; a log with another count belongs to an
            earlier version of the pipeline and cannot be mapped onto its sources
        :param initial: source ``i``'s initial offset, the start of its first batch; called only for a
            source that has no earlier offset (asking a source may cost a connection)
        """
        current = self.read(batch_id)
        if len(current.ends) != sources:
            raise OffsetLogError(
                f"batch {batch_id} has offsets for {len(current.ends)} sources but the pipeline has "
                f"{sources}: its sources changed since the checkpoint was written"
            )
        if batch_id == 0:
            previous: tuple[Any, ...] = (None,) * sources
        else:
            try:
                previous = self.read(batch_id - 1).ends
            except OffsetLogError:
                raise OffsetLogError(
                    f"batch {batch_id - 1}, where batch {batch_id} starts, is no longer in the offset log "
                    f"of {self.checkpoint_dir} (Spark purged it); inspect a later batch"
                ) from None
        out = []
        for i in range(sources):
            start = previous[i] if i < len(previous) and previous[i] is not None else initial(i)
            end = current.ends[i] if current.ends[i] is not None else start
            out.append((start, end))
        return out
