"""What a run did, summed over its micro-batches: the ``records`` and ``dlq`` parts of the exit payload.

Apart from :mod:`.batch` because the job, the status file and the metrics read the counters, and none of
them needs the batch's Spark machinery.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from airflow_conduit.state import PipelineState, RunRecords


@dataclass
class RunCounters:
    """What a run did, summed over its batches; the ``records`` of the exit payload."""

    read: int = 0
    acked: int = 0
    filtered: int = 0
    nacked: int = 0
    dlq: int = 0
    written: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    dlq_files: list[str] = field(default_factory=list)
    dlq_first_position: str | None = None
    dlq_last_position: str | None = None
    dlq_errors: Counter[str] = field(default_factory=Counter)
    source_rows: Counter[str] = field(default_factory=Counter)
    """Records read per source node by the engine itself (sources it reads from their offsets, whose
    rows Spark's progress does not count), summed over the run."""
    destination_bytes: Counter[str] = field(default_factory=Counter)
    """Bytes published per destination node, for destinations that write files (summed over the run)."""
    last_destination_seconds: dict[str, float] = field(default_factory=dict)
    """The last batch's time per destination node: its stage (which may run the batch) and publish."""

    def records(self) -> RunRecords:
        """The counters so far, as the exit payload holds them."""
        return RunRecords(
            read=self.read,
            acked=self.acked,
            filtered=self.filtered,
            nacked=self.nacked,
            dlq=self.dlq,
            written=dict(self.written),
        )

    def dlq_summary(self, state: PipelineState) -> dict[str, Any]:
        return {
            "records": self.dlq,
            "path": str(state.dlq_dir),
            "files": list(self.dlq_files),
            "first_position": self.dlq_first_position,
            "last_position": self.dlq_last_position,
            "errors": dict(self.dlq_errors.most_common(10)),
        }
