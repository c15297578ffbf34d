"""One micro-batch: processors, acks and nacks, destinations and the DLQ (``foreachBatch``).

The batch is computed once and cached; one aggregation over it gives every count the driver needs.
Nothing is written before the batch is known to be acceptable (no stop request from a processor, no
nack past the DLQ window), and Spark commits the batch only after this function returns, i.e. after
every destination and the DLQ wrote it: that is the in-order ack.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.config.model import ConnectorConfig, PipelineConfig
from airflow_conduit.engine import dlq
from airflow_conduit.engine.connectors import DESTINATIONS
from airflow_conduit.engine.connectors.file import write_jsonl
from airflow_conduit.engine.processors import apply_all
from airflow_conduit.errors import Code, PipelineError, PipelineStopped
from airflow_conduit.record import (
    META_COLLECTION,
    META_DLQ_ERROR,
    META_DLQ_NODE,
    RECORD_COLUMNS,
    STATE_FATAL,
    STATE_FILTERED,
    STATE_NACKED,
    STATE_OPEN,
    STATE_TRANSIENT,
    opencdc_struct_sql,
)
from airflow_conduit.state import PipelineState

ROW_BITS = 33  # monotonically_increasing_id: partition index above bit 33, row number below


@dataclass(frozen=True)
class BatchStats:
    """The cached batch, aggregated by partition, state and collection."""

    rows: list[tuple[int, str, str | None, int]]

    @property
    def total(self) -> int:
        return sum(n for *_, n in self.rows)

    def by_state(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for _, state, _, n in self.rows:
            counts[state] += n
        return counts

    def open_by_collection(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for _, state, collection, n in self.rows:
            if state == STATE_OPEN:
                counts[collection or ""] += n
        return counts

    def partition_offsets(self) -> dict[int, int]:
        """How many records of the batch come before each partition, in source order."""
        sizes: Counter[int] = Counter()
        for part, _, _, n in self.rows:
            sizes[part] += n
        offsets, running = {}, 0
        for part in sorted(sizes):
            offsets[part] = running
            running += sizes[part]
        return offsets


def collect_stats(records: DataFrame) -> BatchStats:
    grouped = records.groupBy(
        F.shiftright("_seq", ROW_BITS).alias("part"),
        "_state",
        F.col("metadata")[META_COLLECTION].alias("collection"),
    ).count()
    return BatchStats([(r.part, r._state, r.collection, r["count"]) for r in grouped.collect()])


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

    def records(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "acked": self.acked,
            "filtered": self.filtered,
            "nacked": self.nacked,
            "dlq": self.dlq,
            "written": dict(self.written),
        }

    def dlq_summary(self, state: PipelineState) -> dict[str, Any]:
        return {
            "records": self.dlq,
            "path": str(state.dlq_dir),
            "files": list(self.dlq_files),
            "first_position": self.dlq_first_position,
            "last_position": self.dlq_last_position,
            "errors": dict(self.dlq_errors.most_common(10)),
        }


@dataclass(frozen=True)
class BatchResult:
    batch_id: int
    read: int
    acked: int
    filtered: int
    nacked: int
    written: dict[str, int]


class BatchProcessor:
    """Processes the micro-batches of one pipeline; called by Spark's ``foreachBatch``."""

    def __init__(self, pipeline: PipelineConfig, state: PipelineState) -> None:
        self.pipeline = pipeline
        self.state = state
        self.windows = dlq.WindowStore(state.window_file)
        self.counters = RunCounters()

    # -- the steps --------------------------------------------------------------------------------
    def __call__(self, batch: DataFrame, batch_id: int) -> BatchResult:
        records = apply_all(batch.withColumn("_seq", F.monotonically_increasing_id()), self.pipeline.processors)
        records = records.persist()
        cached = [records]
        try:
            stats = collect_stats(records)
            states = stats.by_state()
            if states[STATE_TRANSIENT] or states[STATE_FATAL]:
                raise PipelineStopped(self._stop_error(records))
            routed = self._route(records, stats)
            nacked = records.filter(F.col("_state") == STATE_NACKED)
            nack_count = states[STATE_NACKED]
            written: dict[str, int] = {}
            frames: list[tuple[ConnectorConfig, DataFrame]] = []
            for destination, frame, open_count in routed:
                if destination.processors:
                    frame = apply_all(frame, destination.processors).persist()
                    cached.append(frame)
                    dest_states = frame.groupBy("_state").count().collect()
                    dest_counts = {r._state: r["count"] for r in dest_states}
                    if dest_counts.get(STATE_TRANSIENT) or dest_counts.get(STATE_FATAL):
                        raise PipelineStopped(self._stop_error(frame))
                    if dest_counts.get(STATE_NACKED):
                        nacked = nacked.unionByName(frame.filter(F.col("_state") == STATE_NACKED))
                    open_count = dest_counts.get(STATE_OPEN, 0)
                frames.append((destination, frame.filter(F.col("_state") == STATE_OPEN)))
                written[destination.id] = open_count
            if any(destination.processors for destination, _ in frames):
                nacked = nacked.dropDuplicates(["_seq"])
                nack_count = nacked.count()
            window_before, window_after = self._check_window(batch_id, stats, nacked, nack_count)
            for destination, frame in frames:
                if written[destination.id]:
                    DESTINATIONS[destination.plugin](frame.select(*RECORD_COLUMNS), destination.settings, batch_id)
            if nack_count:
                self._write_dlq(nacked, batch_id)
            if window_before is not None:
                self.windows.save(batch_id, window_before, window_after)
        finally:
            for frame in cached:
                frame.unpersist()
        return self._account(batch_id, stats.total, states, nack_count, written)

    def _route(self, records: DataFrame, stats: BatchStats) -> list[tuple[ConnectorConfig, DataFrame, int]]:
        """Each destination gets the open records whose collection matches its ``namespace`` regex.

        The regex is applied on the driver to the batch's distinct collections, so routing follows
        Python's ``re.search`` exactly whatever the executors' regex dialect.
        """
        open_records = records.filter(F.col("_state") == STATE_OPEN)
        collections = stats.open_by_collection()
        routed = []
        for destination in self.pipeline.destinations:
            pattern = re.compile(str(destination.settings.get("namespace") or ".*"))
            matching = [c for c in collections if pattern.search(c)]
            count = sum(collections[c] for c in matching)
            if len(matching) == len(collections):
                frame = open_records
            else:
                collection = F.coalesce(F.col("metadata")[META_COLLECTION], F.lit(""))
                frame = open_records.filter(collection.isin(matching))
            routed.append((destination, frame, count))
        return routed

    def _stop_error(self, records: DataFrame) -> PipelineError:
        """The first record (in source order) whose processor asked to stop the pipeline."""
        first = (
            records.filter(F.col("_state").isin(STATE_TRANSIENT, STATE_FATAL))
            .orderBy("_seq")
            .select("_state", "_error", "_node")
            .first()
        )
        code = Code.PROCESSOR_FATAL if first._state == STATE_FATAL else Code.PROCESSOR_TRANSIENT
        return PipelineError(kind=first._state, code=code, message=first._error or "", node=first._node)

    def _check_window(
        self, batch_id: int, stats: BatchStats, nacked: DataFrame, nack_count: int
    ) -> tuple[dlq.NackWindow | None, dlq.NackWindow | None]:
        config = self.pipeline.dlq
        if config.window_size <= 0:
            return None, None  # window-size 0: the DLQ takes every nack
        before = self.windows.load(batch_id, config.window_size, config.window_nack_threshold)
        after = dlq.NackWindow(before.size, before.threshold, before.outcomes.copy())
        offsets = stats.partition_offsets()
        nacks = []
        if nack_count:
            for row in nacked.select("_seq", "_error", "_node", "position").collect():
                part, index = row._seq >> ROW_BITS, row._seq & ((1 << ROW_BITS) - 1)
                nacks.append(dlq.Nack(offsets[part] + index, row._error or "", row._node or "", row.position))
        verdict = dlq.feed(after, stats.total, nacks)
        if verdict.rejected is not None:
            rejected = verdict.rejected
            raise PipelineStopped(
                PipelineError(
                    kind="fatal",
                    code=Code.DLQ_THRESHOLD_EXCEEDED,
                    message=(
                        f"DLQ nack threshold exceeded ({verdict.nacks_in_window}/{config.window_nack_threshold} "
                        f"nacks in the last {config.window_size} records) at record position "
                        f"{bytes(rejected.position).decode(errors='replace')}, original error: {rejected.error}"
                    ),
                    node=rejected.node,
                )
            )
        return before, after

    def _write_dlq(self, nacked: DataFrame, batch_id: int) -> None:
        """Each nacked record, wrapped as Conduit does: a ``create`` whose ``.Payload.After`` is the
        failed record, with the nack error and node in its metadata."""
        wrapped = nacked.selectExpr(
            "position",
            "'create' AS operation",
            f"map_concat(coalesce(metadata, cast(map() as map<string,string>)), "
            f"map('{META_DLQ_ERROR}', coalesce(_error, ''), '{META_DLQ_NODE}', coalesce(_node, ''))) AS metadata",
            "key",
            "key_raw",
            "CAST(NULL AS VARIANT) AS before",
            "CAST(NULL AS BINARY) AS before_raw",
            f"to_variant_object({opencdc_struct_sql()}) AS after",
            "CAST(NULL AS BINARY) AS after_raw",
            "_seq",
            "_error",
        ).persist()
        try:
            records = wrapped.orderBy("_seq").select(*RECORD_COLUMNS)
            files = write_jsonl(records, self.state.dlq_dir, batch_id)
            dlq_config = self.pipeline.dlq
            DESTINATIONS[dlq_config.plugin](records, dict(dlq_config.settings), batch_id)
            self._note_dlq(wrapped, files)
        finally:
            wrapped.unpersist()

    def _note_dlq(self, wrapped: DataFrame, files: list) -> None:
        counters = self.counters
        counters.dlq_files += [str(f) for f in files]
        ends = wrapped.agg(
            F.min_by("position", "_seq").alias("first"), F.max_by("position", "_seq").alias("last")
        ).first()
        if counters.dlq_first_position is None:
            counters.dlq_first_position = bytes(ends.first).decode(errors="replace")
        counters.dlq_last_position = bytes(ends.last).decode(errors="replace")
        for row in wrapped.groupBy("_error").count().orderBy(F.desc("count")).limit(10).collect():
            counters.dlq_errors[row._error or ""] += row["count"]

    def _account(
        self, batch_id: int, total: int, states: Counter[str], nack_count: int, written: dict[str, int]
    ) -> BatchResult:
        counters = self.counters
        counters.batches += 1
        counters.read += total
        counters.acked += total - nack_count
        counters.filtered += states[STATE_FILTERED]
        counters.nacked += nack_count
        counters.dlq += nack_count
        for name, count in written.items():
            key = f"{self.pipeline.id}:{name}"
            counters.written[key] = counters.written.get(key, 0) + count
        return BatchResult(batch_id, total, total - nack_count, states[STATE_FILTERED], nack_count, written)
