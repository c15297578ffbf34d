"""Runs the pipelines of one request in one Spark application, and checks their plans first."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.config.model import PipelineConfig, ProcessorConfig
from airflow_conduit.engine.job import DEFAULT_STOP_TIMEOUT, PipelineRun, RunOptions
from airflow_conduit.engine.processors import repeats_in_attempt
from airflow_conduit.engine.session import get_session
from airflow_conduit.engine.sql_functions import register_functions
from airflow_conduit.errors import EXIT_CONFIG, Code, PipelineError
from airflow_conduit.record import RECORD_SCHEMA
from airflow_conduit.run_lock import LockHolder, PipelineLocked, RunLock
from airflow_conduit.state import ExitPayload, PipelineState, RunRecords, Status, utc_now

logger = logging.getLogger("airflow_conduit.engine")


@dataclass(frozen=True)
class RunRequest:
    pipelines: tuple[PipelineConfig, ...]
    state_dir: Path
    master: str | None = None
    until_idle: bool = False
    stop_timeout: float | None = None
    recover: bool = False
    pipeline_file: Path | None = None
    """Where the pipelines were loaded from (absolute), for their ``started`` events."""

    @property
    def options(self) -> RunOptions:
        return RunOptions(
            until_idle=self.until_idle,
            stop_timeout=DEFAULT_STOP_TIMEOUT if self.stop_timeout is None else self.stop_timeout,
            pipeline_file=str(self.pipeline_file) if self.pipeline_file is not None else None,
        )


class PlanError(Exception):
    """A processor whose Spark SQL does not analyse (a condition naming an unknown function, ...)."""

    def __init__(self, proc: ProcessorConfig, cause: Exception) -> None:
        first_line = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        where = f"{proc.field_path}" + (f" (line {proc.line})" if proc.line else "")
        super().__init__(f"{where}: processor {proc.node_id} ({proc.plugin}) is invalid: {first_line}")
        self.proc = proc


def check_plan(spark: SparkSession, pipeline: PipelineConfig) -> None:
    """Analyse every processor on an empty batch, so Spark SQL errors surface before any data moves,
    naming the processor, instead of failing the first micro-batch. The analysis is the one the run
    asks for again to decide what a batch stores (:func:`repeats_in_attempt` keeps its answer)."""
    empty: DataFrame = spark.createDataFrame([], RECORD_SCHEMA)
    scopes = [pipeline.processors] + [c.processors for c in pipeline.connectors]
    for processors in scopes:
        for proc in processors:
            try:
                repeats_in_attempt(proc, empty, fresh=True)
            except Exception as error:
                raise PlanError(proc, error) from error


def config_failure(pipeline: PipelineConfig, state: PipelineState, message: str) -> dict[str, Any]:
    error = PipelineError("fatal", Code.INVALID_CONFIG, message, None)
    payload = ExitPayload.failure(pipeline.id, error, exit_code=EXIT_CONFIG, records=RunRecords(), batches=0)
    state.write_exit_payload(payload)
    state.write_status(payload.status, error=error.to_dict())
    state.audit(Status.DEGRADED, error=error.to_dict())
    return payload.to_dict()


def refused(pipeline: PipelineConfig, state: PipelineState, locked: PipelineLocked) -> dict[str, Any]:
    """The payload of a run refused because another engine runs the pipeline.

    Only the audit log hears of it: the status and exit payload belong to the engine that runs.
    """
    error = PipelineError("transient", Code.PIPELINE_LOCKED, str(locked), None)
    logger.error("%s", locked)
    holder = locked.holder.to_dict() if locked.holder else None
    state.audit("refused", code=Code.PIPELINE_LOCKED, holder=holder)
    return ExitPayload.failure(pipeline.id, error, records=RunRecords(), batches=0).to_dict()


def lock_run(locks: ExitStack, state: PipelineState) -> None:
    """Take the pipeline's run lock until ``locks`` closes; raises :class:`PipelineLocked`."""
    run_lock = RunLock(state.root, state.pipeline_id)
    run_lock.acquire(LockHolder.of_this_process(utc_now()))
    locks.callback(run_lock.release)


def run_pipelines(
    request: RunRequest,
    *,
    spark: SparkSession | None = None,
    install_signal_handlers: Callable[[Callable[[], None]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run the request's pipelines side by side; returns one exit payload per pipeline, in order.

    Each pipeline's run lock is taken before Spark starts, so a refused run costs no Spark session.
    """
    payloads: dict[str, dict[str, Any]] = {}
    with ExitStack() as locks:
        admitted: list[PipelineConfig] = []
        for pipeline in request.pipelines:
            state = PipelineState(request.state_dir, pipeline.id)
            try:
                lock_run(locks, state)
            except PipelineLocked as locked:
                payloads[pipeline.id] = refused(pipeline, state, locked)
                continue
            admitted.append(pipeline)
        if admitted:
            payloads.update(_run_admitted(admitted, request, spark, install_signal_handlers))
    return [payloads[p.id] for p in request.pipelines]


def _run_admitted(
    pipelines: list[PipelineConfig],
    request: RunRequest,
    spark: SparkSession | None,
    install_signal_handlers: Callable[[Callable[[], None]], None] | None,
) -> dict[str, dict[str, Any]]:
    spark = spark or get_session(request.master)
    register_functions(spark)  # a session the caller built (get_session's have them already)
    runs: list[PipelineRun] = []
    payloads: dict[str, dict[str, Any]] = {}
    for pipeline in pipelines:
        state = PipelineState(request.state_dir, pipeline.id)
        try:
            check_plan(spark, pipeline)
        except PlanError as error:
            logger.error("%s", error)
            payloads[pipeline.id] = config_failure(pipeline, state, str(error))
            continue
        runs.append(PipelineRun(spark, pipeline, state, request.options))

    def stop_all() -> None:
        for run in runs:
            run.request_stop()

    if install_signal_handlers:
        install_signal_handlers(stop_all)
    if request.recover:
        payloads.update(_run_recovering(runs, request))
        return payloads
    for run in runs:
        logger.info(
            "%s: starting (%s)", run.pipeline.id, "until idle" if request.until_idle else "continuous"
        )
        run.start()
    for run in runs:
        payloads[run.pipeline.id] = run.wait()
    return payloads


def _run_recovering(runs: list[PipelineRun], request: RunRequest) -> dict[str, dict[str, Any]]:
    """``--recover``: each pipeline in its own thread, restarted after transient failures with Conduit's
    backoff and window (``AIRFLOW__CONDUIT__*`` settings, as for the Airflow side)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from airflow_conduit.recovery import PipelineRecovery, RecoveryPolicy, run_with_recovery

    policy = RecoveryPolicy.from_env(os.environ)

    def recover(index: int) -> dict[str, Any]:
        first = runs[index]
        attempts = [0]

        def run_once() -> dict[str, Any]:
            if attempts[0]:
                # A fresh query from the checkpoint; kept in `runs` so a stop request reaches it.
                runs[index] = PipelineRun(first.spark, first.pipeline, first.state, first.options)
            attempts[0] += 1
            logger.info("%s: run %d, recovery %s", first.pipeline.id, attempts[0], policy.describe())
            return runs[index].start().wait()

        result = run_with_recovery(run_once, PipelineRecovery(first.state, policy, log=logger))
        return dict(result.payload)

    with ThreadPoolExecutor(max_workers=len(runs) or 1) as pool:
        results = list(pool.map(recover, range(len(runs))))
    return {payload["pipeline"]: payload for payload in results}


def run_pipeline(
    spark: SparkSession, pipeline: PipelineConfig, state_dir: str | Path, options: RunOptions | None = None
) -> dict[str, Any]:
    """Run one pipeline in an existing session (tests, notebooks); returns its exit payload."""
    state = PipelineState(Path(state_dir), pipeline.id)
    with ExitStack() as locks:
        try:
            lock_run(locks, state)
        except PipelineLocked as locked:
            return refused(pipeline, state, locked)
        try:
            check_plan(spark, pipeline)
        except PlanError as error:
            return config_failure(pipeline, state, str(error))
        return PipelineRun(spark, pipeline, state, options or RunOptions()).start().wait()
