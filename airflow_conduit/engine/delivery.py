"""Exactly once: the delivery hash, and what the engine does with destinations' delivery markers.

Spark writes a micro-batch's source offsets to its offset log before running the batch, and after a
crash replays the last uncommitted batch with exactly those offsets. Hashing them with the pipeline and
destination ids (Cues' delivery hash) names a delivery identically on every replay. A destination that
stores the hash of its last delivery together with its data (Transporter's per-writer offsets: the
file destination by an atomic rename, Postgres in the rows' transaction) can then tell that it already
holds a replayed batch, and the engine acknowledges that batch for it without writing: a destination
that committed before a crash skips the replay while the others write it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoggedBatch:
    """What Spark's offset log holds for one micro-batch, read once per batch.

    The log file is ``v1``, a metadata line (its timestamps are fixed at the first attempt, but it also
    holds Spark's configuration, which is not part of the batch), then one line per source.
    """

    offsets: list[str]
    """The source offsets, one canonical JSON text per source."""
    timestamp_ms: int
    """The micro-batch's time (``batchTimestampMs``): a replay of the batch has the same time."""


def logged_batch(checkpoint_dir: str | Path, batch_id: int) -> LoggedBatch:
    path = Path(checkpoint_dir) / "offsets" / str(batch_id)
    lines = path.read_text().splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise ValueError(f"{path}: not a Spark offset log entry")
    offsets = [_canonical(line) for line in lines[2:]]
    return LoggedBatch(offsets, int(json.loads(lines[1])["batchTimestampMs"]))


def source_offsets(checkpoint_dir: str | Path, batch_id: int) -> list[str]:
    """The source offsets of ``batch_id`` as Spark's offset log holds them (:class:`LoggedBatch`)."""
    return logged_batch(checkpoint_dir, batch_id).offsets


def _canonical(offset: str) -> str:
    """Source offsets are JSON: key order must not change the hash."""
    try:
        return json.dumps(json.loads(offset), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return offset.strip()


def delivery_hash(pipeline_id: str, node_id: str, offsets: list[str]) -> str:
    """The hash of (pipeline id, destination or processor id, the batch's source offsets)."""
    material = json.dumps([pipeline_id, node_id, offsets], separators=(",", ":"))
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class BatchContext:
    """What a micro-batch knows about itself; ``custom.python`` functions may take it."""

    pipeline_id: str
    batch_id: int
    offsets: tuple[str, ...]

    def hash_for(self, node_id: str) -> str:
        return delivery_hash(self.pipeline_id, node_id, list(self.offsets))
