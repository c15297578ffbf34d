"""A pipeline's metrics as a Prometheus text file: ``STATE_DIR/PIPELINE_ID/metrics.prom``.

Names follow Conduit's metrics (``measure.go``) where Spark can measure the same thing, and use
Conduit's label names (``pipeline_name``, ``plugin``, ``type``). Two sources feed them:

- the engine's own batch results (:meth:`PipelineMetrics.on_batch`, called from ``foreachBatch``): the
  record counters, which are those of the exit payload, and the DLQ records with their sizes;
- a Spark :class:`StreamingQueryListener` (:meth:`PipelineMetrics.on_progress`): the rows Spark read per
  source, the input and processing rates and the durations of a micro-batch's phases.

Differences from Conduit, because Spark moves micro-batches, not single records:
``conduit_pipeline_execution_duration_seconds`` observes one micro-batch (not one record), and there is
no ``conduit_connector_bytes``, ``conduit_connector_execution_duration_seconds`` or
``conduit_processor_execution_duration_seconds``: Spark fuses sources, processors and destinations into
one plan, so their times cannot be told apart without running the batch more than once.
``conduit_dlq_bytes`` does observe one record: the size of its line in the state dir's DLQ store
(``dlq/``, which holds every DLQ record whatever the pipeline's DLQ plugin).

The file is replaced atomically after every batch and at the end of a run, so node_exporter's textfile
collector (point it at a copy or a symlink, it only reads ``*.prom`` in its own directory) or any scraper
never reads half of it. Counters count one run: a restart starts them at zero, as a restarted process would.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from airflow_conduit import dlq_tools
from airflow_conduit.config.model import PipelineConfig
from airflow_conduit.files import write_atomic
from airflow_conduit.state import PipelineState

logger = logging.getLogger("airflow_conduit.engine")

METRICS_FILE = "metrics.prom"
STATUSES = ("running", "recovering", "degraded", "stopped", "failed")
RECORD_STATES = ("read", "acked", "filtered", "nacked", "dlq")

# Conduit's buckets for bytes (1 KiB to 2 MiB); durations start where a micro-batch starts (its fixed
# cost here is about 0.1 s) and reach a minute, instead of Conduit's per-record 1 ms to 5 s.
BYTES_BUCKETS = tuple(float(1024 << i) for i in range(12))
BATCH_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SPARK_PHASES = ("triggerExecution", "addBatch", "getBatch", "latestOffset", "queryPlanning", "walCommit")
FINAL_PROGRESS_WAIT = 5.0
"""Seconds :meth:`PipelineMetrics.finish` waits for Spark's (asynchronous) progress of the last batch."""

Labels = tuple[tuple[str, str], ...]


# Prometheus text format ------------------------------------------------------------------------------
def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


@dataclass
class Histogram:
    """Cumulative buckets, sum and count of some observations."""

    buckets: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1

    def samples(self, name: str, labels: Labels) -> list[str]:
        lines = [
            f"{name}_bucket{_labels((*labels, ('le', _number(bound))))} {count}"
            for bound, count in zip(self.buckets, self.counts, strict=True)
        ]
        lines.append(f"{name}_bucket{_labels((*labels, ('le', '+Inf')))} {self.count}")
        lines.append(f"{name}_sum{_labels(labels)} {_number(self.total)}")
        lines.append(f"{name}_count{_labels(labels)} {self.count}")
        return lines


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # counter | gauge | histogram
    help: str


FAMILIES = {
    f.name: f
    for f in (
        Family("conduit_pipeline_status", "gauge", "1 for the pipeline's current status, 0 for the others."),
        Family(
            "conduit_pipeline_records_total",
            "counter",
            "Records of this run by state: read, acked, filtered, nacked, dlq (the exit payload's records).",
        ),
        Family(
            "conduit_connector_records_total",
            "counter",
            "Records a destination connector wrote in this run, by pipeline name, connector, plugin and type.",
        ),
        Family(
            "conduit_connector_bytes_total",
            "counter",
            "Bytes a file-writing destination connector published in this run (OpenCDC JSON lines).",
        ),
        Family(
            "conduit_connector_execution_duration_seconds",
            "histogram",
            "Time per micro-batch in a destination connector: its write (which may compute the batch) "
            "and its commit.",
        ),
        Family("conduit_dlq_records_total", "counter", "Records written to the DLQ in this run."),
        Family("conduit_dlq_bytes", "histogram", "Size in bytes of each record written to the DLQ."),
        Family("conduit_pipeline_batches_total", "counter", "Micro-batches processed and committed."),
        Family(
            "conduit_pipeline_execution_duration_seconds",
            "histogram",
            "Time a micro-batch spent in the pipeline (processors, destinations and DLQ).",
        ),
        Family(
            "conduit_spark_source_rows_total",
            "counter",
            "Rows Spark read per streaming source (from the query's progress).",
        ),
        Family(
            "conduit_spark_batch_phase_duration_seconds",
            "histogram",
            "Duration of a micro-batch's phases as Spark reports them (triggerExecution, addBatch, ...).",
        ),
        Family("conduit_pipeline_input_records_per_second", "gauge", "Input rate of the last micro-batch."),
        Family(
            "conduit_pipeline_processed_records_per_second",
            "gauge",
            "Processing rate of the last micro-batch.",
        ),
        Family("conduit_pipeline_last_batch_id", "gauge", "Id of the last micro-batch Spark reported."),
    )
}


def render(samples: Mapping[str, Mapping[Labels, float | Histogram]]) -> str:
    """Prometheus text exposition (format 0.0.4) of ``{family: {labels: value or Histogram}}``."""
    out: list[str] = []
    for name, family in FAMILIES.items():
        series = samples.get(name) or {}
        if not series:
            continue
        out.append(f"# HELP {name} {_escape_help(family.help)}")
        out.append(f"# TYPE {name} {family.kind}")
        for labels, value in sorted(series.items()):
            if isinstance(value, Histogram):
                out.extend(value.samples(name, labels))
            else:
                out.append(f"{name}{_labels(labels)} {_number(value)}")
    return "\n".join(out) + "\n"


# the pipeline's metrics -------------------------------------------------------------------------------
class PipelineMetrics:
    """The metrics of one run of one pipeline; thread-safe (Spark's listener calls from its own thread)."""

    def __init__(self, pipeline: PipelineConfig, state: PipelineState, query_name: str) -> None:
        self.pipeline = pipeline
        self.state = state
        self.query_name = query_name
        self.path = state.root / METRICS_FILE
        self._lock = threading.Condition()
        self._status = "running"
        self._records: dict[str, int] = dict.fromkeys(RECORD_STATES, 0)
        self._written: dict[str, int] = {}
        self._batches = 0
        self._last_committed_batch: int | None = None
        self._last_progress_batch: int | None = None
        self._batch_seconds = Histogram(BATCH_SECONDS_BUCKETS)
        self._connector_seconds: dict[str, Histogram] = {}
        self._connector_bytes: dict[str, int] = {}
        self._dlq_bytes = Histogram(BYTES_BUCKETS)
        self._dlq_seen = dlq_tools.snapshot(state.dlq_dir)
        self._source_rows: dict[str, int] = {}
        self._phases: dict[str, Histogram] = {}
        self._rates: dict[str, float] = {}
        self._spark: SparkSession | None = None
        self._listener: StreamingQueryListener | None = None
        self._run_id: str | None = None

    # wiring ---------------------------------------------------------------------------------------
    def attach(self, spark: SparkSession) -> None:
        """Register the progress listener (before the query starts, so no progress is missed)."""
        self._spark = spark
        self._listener = _ProgressListener(self)
        spark.streams.addListener(self._listener)
        self.write()

    def set_run_id(self, run_id: Any) -> None:
        """Only this query run's progress counts (a restart in the same session has the same name)."""
        with self._lock:
            self._run_id = str(run_id)

    def detach(self) -> None:
        if self._spark is not None and self._listener is not None:
            try:
                self._spark.streams.removeListener(self._listener)
            except Exception:  # a session already stopped: nothing left to remove from
                logger.debug("could not remove the metrics listener", exc_info=True)
        self._listener = None

    # inputs ---------------------------------------------------------------------------------------
    def on_batch(self, batch_id: int, counters: Any, seconds: float) -> None:
        """After a batch was processed: the run's counters (``RunCounters``) and the batch's time."""
        records = counters.records()
        with self._lock:
            previous_dlq = self._records["dlq"]
            self._records = {state: int(records.get(state) or 0) for state in RECORD_STATES}
            self._written = {str(k): int(v) for k, v in (records.get("written") or {}).items()}
            self._batches = int(counters.batches)
            self._last_committed_batch = batch_id
            self._batch_seconds.observe(seconds)
            for node, spent in counters.last_destination_seconds.items():
                self._connector_seconds.setdefault(node, Histogram(BATCH_SECONDS_BUCKETS)).observe(spent)
            self._connector_bytes = {str(k): int(v) for k, v in counters.destination_bytes.items()}
            if self._records["dlq"] > previous_dlq:
                self._observe_dlq_lines()
        self.write()

    def _observe_dlq_lines(self) -> None:
        for path in dlq_tools.dlq_files(self.state.dlq_dir):
            start = self._dlq_seen.get(path.name, 0)
            lines = path.read_bytes().split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            for line in lines[start:]:
                self._dlq_bytes.observe(len(line))
            self._dlq_seen[path.name] = len(lines)

    def on_progress(self, progress: Any) -> None:
        """A ``StreamingQueryProgress`` of this pipeline's query."""
        with self._lock:
            if progress.name != self.query_name or (
                self._run_id is not None and str(progress.runId) != self._run_id
            ):
                return
            for source in progress.sources:
                # Spark appends the source object's identity (``...Stream@1e1f23aa``): a new label per run.
                key = re.sub(r"@[0-9a-f]+$", "", str(source.description))
                self._source_rows[key] = self._source_rows.get(key, 0) + int(source.numInputRows or 0)
            durations = progress.durationMs or {}
            for phase in SPARK_PHASES:
                if phase in durations:
                    histogram = self._phases.setdefault(phase, Histogram(BATCH_SECONDS_BUCKETS))
                    histogram.observe(float(durations[phase]) / 1000.0)
            for name, value in (
                ("input", progress.inputRowsPerSecond),
                ("processed", progress.processedRowsPerSecond),
            ):
                if value is not None and not math.isnan(float(value)):
                    self._rates[name] = float(value)
            self._last_progress_batch = int(progress.batchId)
            self._lock.notify_all()
        self.write()

    def finish(self, status: str, records: Mapping[str, Any] | None = None) -> None:
        """At the end of a run: wait briefly for the last batch's progress, write the final file, detach."""
        with self._lock:
            self._lock.wait_for(self._progress_complete, timeout=FINAL_PROGRESS_WAIT)
            self._status = status
            if records is not None:
                for state in RECORD_STATES:
                    self._records[state] = int(records.get(state) or 0)
                self._written = {str(k): int(v) for k, v in (records.get("written") or {}).items()}
        self.detach()
        self.write()

    def _progress_complete(self) -> bool:
        if self._listener is None or self._last_committed_batch is None:
            return True
        return (
            self._last_progress_batch is not None and self._last_progress_batch >= self._last_committed_batch
        )

    # output ---------------------------------------------------------------------------------------
    def samples(self) -> dict[str, dict[Labels, float | Histogram]]:
        pid = self.pipeline.id
        base: Labels = (("pipeline_name", pid),)
        plugins = {c.node_id: c.plugin for c in self.pipeline.destinations}
        plugins.update({c.id: c.plugin for c in self.pipeline.destinations})
        dlq_plugin: Labels = (*base, ("plugin", self.pipeline.dlq.plugin))

        def connector_labels(node: str) -> Labels:
            return (*base, ("connector", node), ("plugin", plugins.get(node, "")), ("type", "destination"))

        with self._lock:
            return {
                "conduit_pipeline_status": {
                    (*base, ("status", s)): 1.0 if s == self._status else 0.0 for s in STATUSES
                },
                "conduit_pipeline_records_total": {
                    (*base, ("state", s)): float(self._records[s]) for s in RECORD_STATES
                },
                "conduit_connector_records_total": {
                    connector_labels(node): float(count) for node, count in self._written.items()
                },
                "conduit_connector_bytes_total": {
                    connector_labels(node): float(count) for node, count in self._connector_bytes.items()
                },
                "conduit_connector_execution_duration_seconds": {
                    connector_labels(node): _copy(h) for node, h in self._connector_seconds.items()
                },
                "conduit_dlq_records_total": {dlq_plugin: float(self._records["dlq"])},
                "conduit_dlq_bytes": {dlq_plugin: _copy(self._dlq_bytes)},
                "conduit_pipeline_batches_total": {base: float(self._batches)},
                "conduit_pipeline_execution_duration_seconds": {base: _copy(self._batch_seconds)},
                "conduit_spark_source_rows_total": {
                    (*base, ("source", source)): float(rows) for source, rows in self._source_rows.items()
                },
                "conduit_spark_batch_phase_duration_seconds": {
                    (*base, ("phase", phase)): _copy(h) for phase, h in self._phases.items()
                },
                "conduit_pipeline_input_records_per_second": (
                    {base: self._rates["input"]} if "input" in self._rates else {}
                ),
                "conduit_pipeline_processed_records_per_second": (
                    {base: self._rates["processed"]} if "processed" in self._rates else {}
                ),
                "conduit_pipeline_last_batch_id": (
                    {base: float(self._last_progress_batch)} if self._last_progress_batch is not None else {}
                ),
            }

    def render(self) -> str:
        return render(self.samples())

    def write(self) -> None:
        # Metrics must never fail a pipeline: a full disk here is logged, not raised.
        try:
            with self._lock:  # render and replace together: a late listener write never undoes the final one
                write_atomic(self.path, self.render())
        except OSError:
            logger.warning("could not write %s", self.path, exc_info=True)


def _copy(histogram: Histogram) -> Histogram:
    copy = Histogram(histogram.buckets)
    copy.counts, copy.total, copy.count = list(histogram.counts), histogram.total, histogram.count
    return copy


class _ProgressListener(StreamingQueryListener):
    """Hands the progress of the pipeline's query to :class:`PipelineMetrics`."""

    def __init__(self, metrics: PipelineMetrics) -> None:
        self.metrics = metrics

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            self.metrics.on_progress(event.progress)
        except Exception:  # an exception here would only be logged by Py4J, far from its cause
            logger.warning("metrics: could not record a progress event", exc_info=True)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass
