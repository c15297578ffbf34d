"""A pipeline's metrics as a Prometheus text file: ``STATE_DIR/PIPELINE_ID/metrics.prom``.

Names follow Conduit's metrics (``measure.go``) where Spark can measure the same thing, and use
Conduit's label names (``pipeline_name``, ``plugin``, ``type``). Two sources feed them:

- the engine's own batch results (:meth:`PipelineMetrics.on_batch`, called from ``foreachBatch``): the
  record counters, which are those of the exit payload, and the DLQ records with their sizes;
- Spark's progress events (:meth:`PipelineMetrics.on_progress`, :mod:`.progress`): the rows Spark read per
  source, the input and processing rates and the durations of a micro-batch's phases.

Differences from Conduit, because Spark moves micro-batches, not single records:
``conduit_pipeline_execution_duration_seconds`` observes one micro-batch (not one record), and there is
no ``conduit_connector_bytes``, ``conduit_connector_execution_duration_seconds`` or
``conduit_processor_execution_duration_seconds``: Spark fuses sources, processors and destinations into
one plan, so their times cannot be told apart without running the batch more than once.
``conduit_dlq_bytes`` does observe one record: the size of its line in the state dir's DLQ store
(``dlq/``, which holds every DLQ record whatever the pipeline's DLQ plugin).

prometheus_client keeps the values (a registry per pipeline) and renders the text. The file is replaced
atomically after every batch and at the end of a run, so node_exporter's textfile collector (point it at
a copy or a symlink, it only reads ``*.prom`` in its own directory) or any scraper never reads half of it. Counters count one run: a restart starts them at zero, as a restarted process would.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from pyspark.sql import SparkSession

from airflow_conduit import dlq_tools
from airflow_conduit.config.model import PipelineConfig
from airflow_conduit.engine.counters import RunCounters
from airflow_conduit.engine.progress import Progress, ProgressListener
from airflow_conduit.files import write_atomic
from airflow_conduit.state import PipelineState, Status

logger = logging.getLogger("airflow_conduit.engine")

METRICS_FILE = "metrics.prom"
STATUSES = tuple(str(status) for status in Status)
RECORD_STATES = ("read", "acked", "filtered", "nacked", "dlq")

# Conduit's buckets for bytes (1 KiB to 2 MiB); durations start where a micro-batch starts (its fixed
# cost here is about 0.1 s) and reach a minute, instead of Conduit's per-record 1 ms to 5 s.
BYTES_BUCKETS = tuple(float(1024 << i) for i in range(12))
BATCH_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SPARK_PHASES = ("triggerExecution", "addBatch", "getBatch", "latestOffset", "queryPlanning", "walCommit")
FINAL_PROGRESS_WAIT = 5.0
"""Seconds :meth:`PipelineMetrics.finish` waits for Spark's (asynchronous) progress of the last batch."""

BASE = ("pipeline_name",)
CONNECTOR = ("pipeline_name", "connector", "plugin", "type")


class _Families:
    """The metric families of one pipeline, in a registry of their own (not the process-wide default
    one): each run of each pipeline writes its own file, and a second pipeline in the same process
    must not collide with the first one's names."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.status = Gauge(
            "conduit_pipeline_status",
            "1 for the pipeline's current status, 0 for the others.",
            [*BASE, "status"],
            registry=r,
        )
        # prometheus_client drops a counter's _total from the family name and adds it to the sample.
        self.records = Counter(
            "conduit_pipeline_records_total",
            "Records of this run by state: read, acked, filtered, nacked, dlq (the exit payload's records).",
            [*BASE, "state"],
            registry=r,
        )
        self.connector_records = Counter(
            "conduit_connector_records_total",
            "Records a destination connector wrote in this run, by pipeline name, connector, plugin and type.",
            CONNECTOR,
            registry=r,
        )
        self.connector_bytes = Counter(
            "conduit_connector_bytes_total",
            "Bytes a file-writing destination connector published in this run (OpenCDC JSON lines).",
            CONNECTOR,
            registry=r,
        )
        self.connector_seconds = Histogram(
            "conduit_connector_execution_duration_seconds",
            "Time per micro-batch in a destination connector: its write (which may compute the batch) "
            "and its commit.",
            CONNECTOR,
            registry=r,
            buckets=BATCH_SECONDS_BUCKETS,
        )
        self.dlq_records = Counter(
            "conduit_dlq_records_total",
            "Records written to the DLQ in this run.",
            [*BASE, "plugin"],
            registry=r,
        )
        self.dlq_bytes = Histogram(
            "conduit_dlq_bytes",
            "Size in bytes of each record written to the DLQ.",
            [*BASE, "plugin"],
            registry=r,
            buckets=BYTES_BUCKETS,
        )
        self.batches = Counter(
            "conduit_pipeline_batches_total", "Micro-batches processed and committed.", BASE, registry=r
        )
        self.batch_seconds = Histogram(
            "conduit_pipeline_execution_duration_seconds",
            "Time a micro-batch spent in the pipeline (processors, destinations and DLQ).",
            BASE,
            registry=r,
            buckets=BATCH_SECONDS_BUCKETS,
        )
        self.source_rows = Counter(
            "conduit_spark_source_rows_total",
            "Rows read per streaming source: Spark's, from the query's progress (source: Spark's "
            "description of it), and the engine's own reads (source: the source's node id, for "
            "builtin:file, which the engine reads from the batch's offsets).",
            [*BASE, "source"],
            registry=r,
        )
        self.phases = Histogram(
            "conduit_spark_batch_phase_duration_seconds",
            "Duration of a micro-batch's phases as Spark reports them (triggerExecution, addBatch, ...).",
            [*BASE, "phase"],
            registry=r,
            buckets=BATCH_SECONDS_BUCKETS,
        )
        self.input_rate = Gauge(
            "conduit_pipeline_input_records_per_second",
            "Input rate of the last micro-batch.",
            BASE,
            registry=r,
        )
        self.processed_rate = Gauge(
            "conduit_pipeline_processed_records_per_second",
            "Processing rate of the last micro-batch.",
            BASE,
            registry=r,
        )
        self.last_batch = Gauge(
            "conduit_pipeline_last_batch_id", "Id of the last micro-batch Spark reported.", BASE, registry=r
        )


class _TextFileView:
    """The registry as the file shows it: without ``_created`` samples and without empty families.

    ``_created`` is dropped here rather than with ``prometheus_client.disable_created_metrics()``, which
    is process-wide and would change the output of any other user of prometheus_client in the process.
    Families without series (a labelled metric before its first value) are left out, as the file always
    did, so a rate appears once Spark reported one.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        for metric in self.registry.collect():
            metric.samples = [s for s in metric.samples if s.name != f"{metric.name}_created"]
            if metric.samples:
                yield metric


def _mirror(
    counter: Counter,
    labels: Callable[[str], tuple[str, ...]],
    before: Mapping[str, int],
    after: Mapping[str, int],
) -> None:
    """Make ``counter``'s series show the totals ``after``, which the engine counts itself (``RunCounters``).

    prometheus_client's counters only go up by an amount, so each series goes up by what its total grew
    since ``before``; a total that went down (not seen within a run) resets its series, and a key that
    is gone loses its series, so the file always shows exactly ``after``.
    """
    for key in before.keys() - after.keys():
        counter.remove(*labels(key))
    for key, value in after.items():
        series = counter.labels(*labels(key))
        previous = before.get(key, 0)
        if value < previous:
            series.reset()
            previous = 0
        series.inc(value - previous)


# the pipeline's metrics -------------------------------------------------------------------------------
class PipelineMetrics:
    """The metrics of one run of one pipeline; thread-safe (Spark's listener calls from its own thread)."""

    def __init__(self, pipeline: PipelineConfig, state: PipelineState, query_name: str) -> None:
        self.pipeline = pipeline
        self.state = state
        self.query_name = query_name
        self.path = state.root / METRICS_FILE
        self._lock = threading.Condition()
        self._m = _Families()
        self._view = _TextFileView(self._m.registry)
        pid = pipeline.id
        self._pid = pid
        self._dlq_plugin = pipeline.dlq.plugin
        self._plugins = {c.node_id: c.plugin for c in pipeline.destinations}
        self._plugins.update({c.id: c.plugin for c in pipeline.destinations})
        # The totals the counters show (RunCounters' or the exit payload's), to advance them by the difference.
        self._records: dict[str, int] = dict.fromkeys(RECORD_STATES, 0)
        self._written: dict[str, int] = {}
        self._connector_bytes: dict[str, int] = {}
        self._source_rows: dict[str, int] = {}
        self._batches = 0
        self._last_committed_batch: int | None = None
        self._last_progress_batch: int | None = None
        self._dlq_seen = dlq_tools.snapshot(state.dlq_dir)
        self._spark: SparkSession | None = None
        self._listener: ProgressListener | None = None
        self._run_id: str | None = None
        # The series the file shows from the start, in the (sorted) order the file always had.
        self._set_status(Status.RUNNING)
        for record_state in sorted(RECORD_STATES):
            self._m.records.labels(pid, record_state)
        self._m.dlq_records.labels(pid, self._dlq_plugin)
        self._m.dlq_bytes.labels(pid, self._dlq_plugin)
        self._m.batches.labels(pid)
        self._m.batch_seconds.labels(pid)

    def _connector(self, node: str) -> tuple[str, ...]:
        return (self._pid, node, self._plugins.get(node, ""), "destination")

    def _set_status(self, status: str) -> None:
        for name in sorted(STATUSES):
            self._m.status.labels(self._pid, name).set(1.0 if name == status else 0.0)

    # wiring ---------------------------------------------------------------------------------------
    def attach(self, spark: SparkSession) -> None:
        """Register the progress listener (before the query starts, so no progress is missed)."""
        self._spark = spark
        self._listener = ProgressListener(self.on_progress)
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
    def on_batch(self, batch_id: int, counters: RunCounters, seconds: float) -> None:
        """After a batch was processed: the run's counters and the batch's time."""
        records = counters.records().to_dict()
        with self._lock:
            previous_dlq = self._records["dlq"]
            self._set_records(records)
            batches = int(counters.batches)
            _mirror(self._m.batches, lambda _: (self._pid,), {"": self._batches}, {"": batches})
            self._batches = batches
            self._last_committed_batch = batch_id
            self._m.batch_seconds.labels(self._pid).observe(seconds)
            for node, spent in counters.last_destination_seconds.items():
                self._m.connector_seconds.labels(*self._connector(node)).observe(spent)
            published = {str(k): int(v) for k, v in counters.destination_bytes.items()}
            _mirror(self._m.connector_bytes, self._connector, self._connector_bytes, published)
            self._connector_bytes = published
            read_directly = {str(k): int(v) for k, v in counters.source_rows.items()}
            _mirror(self._m.source_rows, lambda node: (self._pid, node), self._source_rows, read_directly)
            self._source_rows = read_directly
            if self._records["dlq"] > previous_dlq:
                self._observe_dlq_lines()
        self.write()

    def _set_records(self, records: Mapping[str, Any]) -> None:
        """The record counters from a ``records`` dict (of ``RunCounters.records()`` or the exit payload)."""
        totals = {state: int(records.get(state) or 0) for state in RECORD_STATES}
        written = {str(k): int(v) for k, v in (records.get("written") or {}).items()}
        _mirror(self._m.records, lambda s: (self._pid, s), self._records, totals)
        _mirror(
            self._m.dlq_records,
            lambda _: (self._pid, self._dlq_plugin),
            {"": self._records["dlq"]},
            {"": totals["dlq"]},
        )
        _mirror(self._m.connector_records, self._connector, self._written, written)
        self._records, self._written = totals, written

    def _observe_dlq_lines(self) -> None:
        series = self._m.dlq_bytes.labels(self._pid, self._dlq_plugin)
        for path in dlq_tools.dlq_files(self.state.dlq_dir):
            start = self._dlq_seen.get(path.name, 0)
            lines = path.read_bytes().split(b"\n")
            if lines and lines[-1] == b"":
                lines.pop()
            for line in lines[start:]:
                series.observe(len(line))
            self._dlq_seen[path.name] = len(lines)

    def on_progress(self, progress: Progress) -> None:
        """The progress of a micro-batch of this session's queries; only this pipeline's run counts."""
        with self._lock:
            if progress.name != self.query_name or (
                self._run_id is not None and progress.run_id != self._run_id
            ):
                return
            for source in progress.sources:
                # Spark appends the source object's identity (``...Stream@1e1f23aa``): a new label per run.
                key = re.sub(r"@[0-9a-f]+$", "", source.description)
                self._m.source_rows.labels(self._pid, key).inc(source.input_rows)
            for phase in SPARK_PHASES:
                if phase in progress.durations_ms:
                    self._m.phases.labels(self._pid, phase).observe(progress.durations_ms[phase] / 1000.0)
            for gauge, value in (
                (self._m.input_rate, progress.input_rows_per_second),
                (self._m.processed_rate, progress.processed_rows_per_second),
            ):
                if value is not None:
                    gauge.labels(self._pid).set(value)
            self._last_progress_batch = progress.batch_id
            self._m.last_batch.labels(self._pid).set(self._last_progress_batch)
            self._lock.notify_all()
        self.write()

    def finish(self, status: str, records: Mapping[str, Any] | None = None) -> None:
        """At the end of a run: wait briefly for the last batch's progress, write the final file, detach."""
        with self._lock:
            self._lock.wait_for(self._progress_complete, timeout=FINAL_PROGRESS_WAIT)
            self._set_status(status)
            if records is not None:
                self._set_records(records)
        self.detach()
        self.write()

    def _progress_complete(self) -> bool:
        if self._listener is None or self._last_committed_batch is None:
            return True
        return (
            self._last_progress_batch is not None and self._last_progress_batch >= self._last_committed_batch
        )

    # output ---------------------------------------------------------------------------------------
    def render(self) -> str:
        """Prometheus text exposition (format 0.0.4) of the pipeline's metrics."""
        with self._lock:
            return generate_latest(self._view).decode("utf-8")

    def write(self) -> None:
        # generate_latest + write_atomic rather than prometheus_client's write_to_textfile: that one
        # renames its own temp file without fsync and leaves mkstemp's 0600 mode, so node_exporter
        # running as another user could not read the file; write_atomic is the project's one atomic write.
        # Metrics must never fail a pipeline: a full disk here is logged, not raised.
        try:
            with self._lock:  # render and replace together: a late listener write never undoes the final one
                write_atomic(self.path, self.render())
        except OSError:
            logger.warning("could not write %s", self.path, exc_info=True)
