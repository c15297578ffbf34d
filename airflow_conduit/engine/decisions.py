"""The decision log: a decided micro-batch kept until every output has published it.

Publishing a batch takes several steps: each destination, the DLQ store, the DLQ plugin. A crash
between two of them leaves some outputs holding the batch and the others not; Spark then replays the
batch, the outputs that hold it skip it (their delivery marker) and the others write it. If the replay
ran the processors again, a processor that is not a pure function (``custom.python``: a flaky service,
a random value) would decide again, differently: a record written by one destination in the first
attempt could land in the DLQ in the second, another in neither. And a destination that refused records
(they go to the DLQ) is not asked again once it holds the batch, so its refusals would be forgotten.

So when a batch publishes to more than one output and a replay could not recompute the same decision,
the decided rows (the records after the pipeline's processors, each destination's after its own, and
the DLQ's) are written to ``STATE/PIPELINE/decisions/BATCH/`` before the first publish, ``decided.json``
last (the commit point). A replay of that batch reads them instead of running any processor, and the
outputs that do not hold the batch yet get the same rows the others got. The entry is removed once every
output published.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.state import write_json_atomic

MARKER = "decided.json"
RECORDS = "records"
NACKED = "nacked"


def destination_part(node_id: str) -> str:
    """The part holding a destination's rows after its own processors."""
    return "destination-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in node_id)


@dataclass(frozen=True)
class Decision:
    """A decided batch read back from the log: one frame per part."""

    frames: dict[str, DataFrame]

    @property
    def records(self) -> DataFrame:
        return self.frames[RECORDS]

    @property
    def nacked(self) -> DataFrame | None:
        return self.frames.get(NACKED)

    def destination(self, node_id: str) -> DataFrame | None:
        return self.frames.get(destination_part(node_id))


@dataclass(frozen=True)
class DecisionLog:
    root: Path

    def _entry(self, batch_id: int) -> Path:
        return self.root / f"{batch_id:012d}"

    def save(self, batch_id: int, delivery_hash: str, frames: dict[str, DataFrame]) -> None:
        """Write the decided rows of ``batch_id``; ``delivery_hash`` names the batch (its offsets)."""
        entry = self._entry(batch_id)
        shutil.rmtree(entry, ignore_errors=True)
        for part, frame in frames.items():
            frame.write.parquet(str(entry / part))
        write_json_atomic(entry / MARKER, {"batch": batch_id, "hash": delivery_hash, "parts": sorted(frames)})

    def load(self, spark: SparkSession, batch_id: int, delivery_hash: str) -> Decision | None:
        """The decision of ``batch_id`` if a former attempt logged it for the same offsets."""
        marker = self._entry(batch_id) / MARKER
        if not marker.exists():
            return None
        logged = json.loads(marker.read_text())
        if logged.get("hash") != delivery_hash:
            return None
        entry = self._entry(batch_id)
        return Decision({part: spark.read.parquet(str(entry / part)) for part in logged["parts"]})

    def remove(self, batch_id: int) -> None:
        shutil.rmtree(self._entry(batch_id), ignore_errors=True)

    def prune(self, before_batch: int) -> None:
        """Drop the entries of batches before ``before_batch``: Spark committed them (it runs a batch
        only after the one before committed)."""
        if self.root.is_dir():
            for entry in self.root.iterdir():
                if not (entry.name.isdigit() and int(entry.name) >= before_batch):
                    shutil.rmtree(entry, ignore_errors=True)
