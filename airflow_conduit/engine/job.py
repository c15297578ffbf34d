"""Builds a pipeline's streaming query from a validated config and runs it to a stop.

spark-submit's entry point is :mod:`airflow_conduit.cli.spark_submit` (``airflow-conduit run`` in the
driver).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from airflow_conduit.batch_log import BatchEntry, append_batch
from airflow_conduit.config.model import PipelineConfig
from airflow_conduit.config.registry import spark_sources
from airflow_conduit.config.settings import UNSTORED_MAX_RECORDS_PER_BATCH
from airflow_conduit.engine.batch import BatchProcessor, BatchResult
from airflow_conduit.engine.intake import admitted_sources, source_stream
from airflow_conduit.engine.lag import SourceLags
from airflow_conduit.engine.metrics import PipelineMetrics
from airflow_conduit.engine.planners import PLANNING, reads_its_source
from airflow_conduit.engine.processors._python_paths import ship_function_paths
from airflow_conduit.errors import CODE_NOTE, EXIT_STOPPED, Code, PipelineError, PipelineStopped
from airflow_conduit.run_origin import airflow_context
from airflow_conduit.state import ExitPayload, PipelineState, Status, utc_now

logger = logging.getLogger("airflow_conduit.engine")

DEFAULT_STOP_TIMEOUT = 30.0  # seconds; Transporter's window for the batch in flight
DEFAULT_TRIGGER_INTERVAL = "100 milliseconds"
"""Continuous mode: a micro-batch starts at most this often. A record waits for the next batch to start,
then for that batch: at 1,000 records/s, p50 end-to-end 0.42-0.54 s at 100 ms against 0.50-0.67 s at
500 ms (benchmarks/latency.py). An idle pipeline used 1.3-1.9% of a core at 100 ms, 0.8% at 500 ms; the
sources keep their own polling periods, so their servers are not asked more often."""


@dataclass(frozen=True)
class RunOptions:
    until_idle: bool = False
    """Process what the sources hold now, then stop gracefully (Spark's AvailableNow)."""
    stop_timeout: float = DEFAULT_STOP_TIMEOUT
    """After a stop request, how long the batch in flight may take before the stop is forceful."""
    trigger_interval: str = DEFAULT_TRIGGER_INTERVAL
    """In continuous mode, the least time between micro-batch starts."""
    pipeline_file: str | None = None
    """The pipeline file's absolute path, for the ``started`` event (a replay is started from it)."""


class PipelineRun:
    """One run of one pipeline: start, then :meth:`wait` for its end and exit payload."""

    def __init__(
        self,
        spark: SparkSession,
        pipeline: PipelineConfig,
        state: PipelineState,
        options: RunOptions | None = None,
        on_batch: Callable[[PipelineRun, BatchResult], None] | None = None,
    ) -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.state = state
        self.options = options or RunOptions()
        self.on_batch = on_batch
        self.processor = BatchProcessor(pipeline, state, state.generation())
        self.metrics = PipelineMetrics(pipeline, state, f"conduit-{pipeline.id}")
        self.lags = SourceLags(pipeline)
        self.error: PipelineError | None = None
        self.query: StreamingQuery | None = None
        self.started_at = utc_now()
        self._started_clock = time.monotonic()
        self._stop_asked_at: float | None = None
        self._in_batch = False
        self._forced = False

    @property
    def counters(self):
        return self.processor.counters

    def start(self) -> PipelineRun:
        PLANNING.started(self)  # before the sources' streams are created: that plans too
        try:
            return self._start()
        except BaseException:
            PLANNING.ended(self)
            raise

    def _start(self) -> PipelineRun:
        state = self.state
        state.clear_stop_request()
        state.checkpoint_dir.parent.mkdir(parents=True, exist_ok=True)
        ship_function_paths(self.spark, self.pipeline, state.root / "python")
        self.processor.analyse(self.spark)
        sources = admitted_sources(self.pipeline, nothing_stored=self.processor.nothing_stored)
        if sources != self.pipeline.sources:
            logger.info(
                "%s: micro-batches of up to %s records a source (nothing of a batch is stored; "
                "maxRecordsPerBatch sets it)",
                self.pipeline.id,
                f"{UNSTORED_MAX_RECORDS_PER_BATCH:,}",
            )
        streams = [source_stream(self.spark, i, s, state) for i, s in enumerate(sources)]
        union = reduce(DataFrame.unionByName, streams)
        writer = (
            union.writeStream.queryName(f"conduit-{self.pipeline.id}")
            .foreachBatch(self._run_batch)
            .option("checkpointLocation", str(state.checkpoint_dir))
        )
        if self.options.until_idle:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.options.trigger_interval)
        origin = self.origin()
        state.write_status(
            Status.RUNNING,
            error=None,
            started_at=self.started_at,
            counters=self.counters.records().to_dict(),
            **origin,
        )
        state.audit("started", mode="until_idle" if self.options.until_idle else "continuous", **origin)
        if acked := state.read_acked():
            state.audit("skipping_acked", positions=[e.get("position_text") for e in acked])
        self.metrics.attach(self.spark)  # removed again in finish()
        try:
            self.query = writer.start()
        except BaseException:
            self.metrics.detach()
            raise
        self.metrics.set_run_id(self.query.runId)
        return self

    def origin(self) -> dict[str, Any]:
        """Where the run comes from: ``file`` (the pipeline file), ``cwd`` (the driver's working directory,
        which relative paths in the file are read against), ``master`` (the Spark master) and ``airflow``
        (the task instance that started it, from its ``AIRFLOW_CTX_*`` environment, else ``None``)."""
        return {
            "file": self.options.pipeline_file,
            "cwd": os.getcwd(),
            "master": self.spark.sparkContext.master,
            "airflow": airflow_context(os.environ),
        }

    def _run_batch(self, batch: DataFrame, batch_id: int) -> None:
        # A pipeline with more sources keeps the planners: one with no data yet plans its read later.
        if len(self.pipeline.sources) == 1 and PLANNING.waits_for(self) and reads_its_source(batch):
            PLANNING.planned(self.spark, self)
        self._in_batch = True
        started_at = utc_now()
        started = time.monotonic()
        try:
            result = self.processor(batch, batch_id)
        except PipelineStopped as stop:
            self.error = stop.error
            raise
        finally:
            self._in_batch = False
        seconds = time.monotonic() - started
        self._log_batch(result, started_at, seconds)
        self.state.write_status(
            Status.RUNNING, counters=self.counters.records().to_dict(), batches=self.counters.batches
        )
        logger.info(
            "%s: batch %d: %d records (%d acked, %d filtered, %d nacked) in %.2fs, %.0f records/s; total read %d",
            self.pipeline.id,
            batch_id,
            result.read,
            result.acked,
            result.filtered,
            result.nacked,
            seconds,
            result.read / seconds if seconds else 0.0,
            self.counters.read,
        )
        self.metrics.on_batch(batch_id, self.counters, seconds)
        if self.on_batch:
            self.on_batch(self, result)

    def _log_batch(self, result: BatchResult, started_at: str, seconds: float) -> None:
        """One line of the batch log: the batch is in every destination and the DLQ (Spark commits
        it as ``foreachBatch`` returns). The log serves the UI's charts: failing to write it never
        fails the pipeline."""
        written_by = {f"{self.pipeline.id}:{name}": count for name, count in result.written.items()}
        entry = BatchEntry(
            batch=result.batch_id,
            run_started_at=self.started_at,
            started_at=started_at,
            ended_at=utc_now(),
            seconds=round(seconds, 3),
            read=result.read,
            written=sum(written_by.values()),
            written_by=written_by,
            filtered=result.filtered,
            dlq=result.nacked,
            lag=self.lags.at(self.processor.context.offsets),
        )
        try:
            append_batch(self.state, entry)
        except OSError:
            logger.warning("could not write %s", self.state.batches_file, exc_info=True)

    def request_stop(self) -> None:
        """Graceful stop: sources report no new data, the batch in flight completes and commits."""
        if self._stop_asked_at is None:
            self._stop_asked_at = time.monotonic()
            self.state.request_stop()
            self.state.audit("stop_requested", timeout_seconds=self.options.stop_timeout)

    def wait(self, poll_seconds: float = 0.5) -> dict[str, Any]:
        """Block until the query ends (by itself, a stop request or an error); returns the exit payload."""
        assert self.query is not None, "start() first"
        query = self.query
        try:
            # PySpark annotates the timeout as int but takes float seconds (it sends int(timeout * 1000)).
            while not query.awaitTermination(poll_seconds):  # type: ignore[arg-type]
                if self._stop_asked_at is None and self.state.stop_requested:
                    self.request_stop()  # asked through the state dir, e.g. by `airflow-conduit stop`
                if self._stop_asked_at is not None:
                    self._stop_when_idle(query)
        except Exception as failure:  # a Spark or Py4J failure: the exit payload is still written
            if self.error is None:
                self.error = classify_failure(failure)
                log_failure(self.pipeline.id, self.error, failure)
        except KeyboardInterrupt:
            query.stop()
            self.error = PipelineError("transient", Code.INTERRUPTED, "interrupted", None)
        return self.finish()

    def _stop_when_idle(self, query: StreamingQuery) -> None:
        waited = time.monotonic() - (self._stop_asked_at or 0)
        if not self._in_batch and not query.status["isTriggerActive"]:
            query.stop()
        elif waited > self.options.stop_timeout:
            self._forced = True
            query.stop()

    def finish(self) -> dict[str, Any]:
        """Write how the run ended (exit payload, status, audit events); returns the payload's JSON."""
        state = self.state
        if self._forced and self.error is None:
            self.error = PipelineError(
                "transient",
                Code.STOP_TIMEOUT,
                f"the batch in flight did not finish within {self.options.stop_timeout:g}s of the stop "
                "request; it was dropped and will be read again on restart",
                None,
            )
        error = self.error
        payload = ExitPayload(
            pipeline=self.pipeline.id,
            status=Status.of_error(error),
            exit_code=EXIT_STOPPED if error is None else error.exit_code,
            error=error,
            records=self.counters.records(),
            batches=self.counters.batches,
            started_at=self.started_at,
            ended_at=utc_now(),
            duration_seconds=round(time.monotonic() - self._started_clock, 3),
            dlq=self.counters.dlq_summary(state),
            state_dir=str(state.root),
        )
        state.write_exit_payload(payload)
        PLANNING.ended(self)
        self.lags.close()
        records = payload.counters.to_dict()
        self.metrics.finish(payload.status, records)
        state.write_status(
            payload.status,
            error=error.to_dict() if error is not None else None,
            counters=records,
            ended_at=payload.ended_at,
        )
        if error is not None:
            state.audit(
                "fault", classification=error.kind, code=error.code, message=error.message, node=error.node
            )
            if error.kind == "fatal":
                state.audit(Status.DEGRADED, error=error.to_dict())
        else:
            state.audit(Status.STOPPED, records=records)
        state.clear_stop_request()
        return payload.to_dict()


MESSAGE_LIMIT = 500
"""The most characters of a failure the exit payload's error message keeps (the log has all of it)."""

_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(: |$)")
_CAUSED_BY = re.compile(r"^Caused by: (.+)$", re.MULTILINE)
_QUERY_WRAPPER = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")
_SQLSTATE = re.compile(r"(\s+SQLSTATE: \w+)+\s*$")


# StreamingQueryException's description of the query (id, offsets, logical plan), up to the JVM trace.
_QUERY_DESCRIPTION = re.compile(r"=== Streaming Query ===.*?(?=\nJVM stacktrace:|\Z)", re.S)


def classify_failure(failure: Exception) -> PipelineError:
    """A Spark failure that no processor classified: transient, as in Conduit (a source or destination
    unreachable, a task lost, ...)."""
    text = str(failure).strip()
    # The engine's sources are Python data sources, named in their specs (spark_source): failures name them.
    # Failures of a source's driver-side calls (initialOffset, latestOffset, ...) name the error class.
    # Not looked for in the query's description, whose plan names the sources whatever failed.
    outside_plan = _QUERY_DESCRIPTION.sub("", text)
    names = "|".join(re.escape(name) for name in spark_sources())
    source = re.search(rf"\b(?:{names})\b|PYTHON_STREAMING_DATA_SOURCE", outside_plan)
    code = Code.SOURCE_FAILED if source else Code.SPARK_FAILED
    # A connector's own TransientError/FatalError, raised on an executor, reaches the driver only as
    # the text of Python's traceback: its last line says which it was.
    raised = list(re.finditer(r"airflow_conduit\.errors\.(FatalError|TransientError): ([^\n]*)", text))
    if raised:
        fatal = raised[-1].group(1) == "FatalError"
        message = raised[-1].group(2).strip()[:MESSAGE_LIMIT]
        # A connector's error names its code in a note under its line (errors.CODE_NOTE).
        noted = re.compile(rf"\n{re.escape(CODE_NOTE)}(\w+)").match(text, raised[-1].end())
        return PipelineError("fatal" if fatal else "transient", noted[1] if noted else code, message, None)
    return PipelineError("transient", code, failure_message(text) or type(failure).__name__, None)


def failure_message(text: str) -> str:
    """The line of a Spark failure that says what went wrong, for the exit payload.

    Spark's first line only says that the query failed (``[STREAM_FAILED] Query [...] terminated with
    exception: ... Traceback (most recent call last):``). The cause is the last Python exception of an
    embedded traceback (an error in the foreachBatch function or a Python worker), else the innermost
    ``Caused by:`` of a Java stack trace, else the first line without the query wrapper. Spark's
    ``SQLSTATE`` suffixes are dropped; at most :data:`MESSAGE_LIMIT` characters.
    """
    message = _python_root(text) or _java_root(text) or _QUERY_WRAPPER.sub("", _first_line(text))
    return _SQLSTATE.sub("", message).strip()[:MESSAGE_LIMIT]


def _python_root(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text``: the first unindented line after
    the frames (a chained exception has a traceback of its own, so the last one is the outermost)."""
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    for line in text[at + len(_TRACEBACK) :].splitlines():
        if line.strip() and not line[0].isspace():
            return line.strip() if _EXCEPTION_LINE.match(line) else None
    return None


def _java_root(text: str) -> str | None:
    causes = _CAUSED_BY.findall(text)
    return causes[-1].strip() if causes else None


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def log_failure(pipeline_id: str, error: PipelineError, failure: Exception) -> None:
    """Log the whole text of a failure the engine classified itself: the exit payload keeps only the
    line that names the cause, and whoever reads the log (spark-submit's output file under Airflow)
    needs the traces too. The first line stays short, for the task log that shows only it."""
    logger.error("%s: the query failed: %s\n%s", pipeline_id, error.message, str(failure).strip())
