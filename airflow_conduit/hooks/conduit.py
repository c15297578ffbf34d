"""Submit a Conduit pipeline to Spark through the Spark provider's ``SparkSubmitHook``."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

import airflow_conduit
from airflow_conduit import dlq_tools
from airflow_conduit.engine.jvm import DRIVER_GC_OPTIONS, ENGINE_CONFS, local_driver_options
from airflow_conduit.engine.python_startup import with_worker_site
from airflow_conduit.errors import EXIT_CONFIG, EXIT_STOPPED, Code, PipelineError
from airflow_conduit.hooks.engine_session import engine_alive, engine_processes, kill_engine
from airflow_conduit.hooks.spark_output import (
    SPARK_OUTPUT_FILES_KEPT,
    ConduitSparkSubmitHook,
    parse_payload_line,
    prune_spark_outputs,
)
from airflow_conduit.recovery.runner import Outcome
from airflow_conduit.state import ExitPayload, PipelineState, Status, format_time, parse_time

__all__ = ["ConduitHook", "PipelineRun", "engine_application", "parse_payload_line"]

Mode = Literal["until_idle", "continuous"]
MODES: tuple[str, ...] = ("until_idle", "continuous")
PayloadSource = Literal["state_dir", "stdout", "none"]

DEFAULT_ENGINE_EXIT_TIMEOUT = 30.0
"""Seconds :meth:`ConduitHook.run_pipeline` waits for the engine's processes after spark-submit exited."""


def engine_application() -> str:
    """The path of the engine's spark-submit entry point, ``airflow_conduit/cli/spark_submit.py``.

    Found without importing the engine (which imports pyspark).
    """
    return str(Path(airflow_conduit.__file__).resolve().parent / "cli" / "spark_submit.py")


@dataclass
class PipelineRun:
    """One submission of a pipeline and how it ended."""

    pipeline_id: str
    state_dir: str
    exit_payload: ExitPayload
    """How the run ended; synthesised from the exit code when the job left none."""
    payload_source: PayloadSource
    returncode: int | None
    submitted_at: datetime
    ended_at: datetime
    dlq_snapshot: dict[str, int] = field(default_factory=dict)
    """DLQ line counts before the run: what lies beyond them is this run's DLQ records."""
    engine_pid: int | None = None
    """The pid of spark-submit, which led the engine's session (every process of it had exited
    before the run returned)."""
    spark_output_file: str | None = None
    """The file that holds every line spark-submit printed in this run."""

    @property
    def payload(self) -> dict[str, Any]:
        """The exit payload's JSON, as in ``exit.json``."""
        return self.exit_payload.to_dict()

    @property
    def exit_code(self) -> int:
        return self.exit_payload.exit_code

    @property
    def outcome(self) -> Outcome:
        """``stopped``, or the failure's kind (the error's, else the exit code's)."""
        return self.exit_payload.kind or "stopped"

    @property
    def records(self) -> dict[str, Any]:
        """The run's counters as in the payload's JSON (``{}`` when it left none; typed:
        ``exit_payload.records``)."""
        return self.payload["records"]

    @property
    def duration(self) -> timedelta:
        return self.ended_at - self.submitted_at


def _fingerprint(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


class ConduitHook(BaseHook):
    """Runs the airflow-conduit engine under ``spark-submit`` and reads how the run ended.

    The Spark master comes from the Spark connection's host (``local[*]``, ``spark://host:7077``,
    ``yarn`` ...). The job's Python is this interpreter unless ``python`` says otherwise (Spark's
    workers use ``PYSPARK_PYTHON``). The exit payload is read from ``STATE_DIR/PIPELINE_ID/exit.json``
    when the run rewrote it, else from the last payload line of the job's output (a job that ran on
    another machine), else synthesised from the exit code.

    :param spark_conn_id: the Spark connection (type ``spark``); default ``spark_default``
    :param conf: Spark configuration properties for ``--conf``; ``spark.driver.extraJavaOptions``
        defaults to the engine's GC setting (:data:`~airflow_conduit.engine.jvm.DRIVER_GC_OPTIONS`), and
        in client mode its native heap's trimming where this machine's java knows it and the class
        archive where one is built here (:func:`~airflow_conduit.engine.jvm.local_driver_options`)
    :param env_vars: extra environment of the job (e.g. for ``${VAR}`` in the pipeline file)
    :param python: the Python of the driver and the executors (default: this interpreter)
    :param name: the Spark application name (default ``conduit-PIPELINE_ID``)
    :param application: the engine entry point (default :func:`engine_application`)
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (``driver_memory``, ``jars``, ...)
    :param stop_timeout: seconds :meth:`on_kill` waits for a graceful stop before killing the job
    :param engine_exit_timeout: seconds :meth:`run_pipeline` waits, after spark-submit exited, for the
        rest of the engine's processes (the Python driver, Spark's Python workers) before killing them

    spark-submit runs in a session of its own, which holds every process of the engine, so that
    :meth:`on_kill` and :meth:`run_pipeline` can end it as a whole; the task process dying does not take it down (a
    SIGKILL of the task leaves the engine running). Its whole output goes to
    ``STATE_DIR/PIPELINE_ID/logs/spark-submit-TIMESTAMP.log``; the task log gets the engine's own log
    records and its end-of-run summary at INFO, the rest at DEBUG (:class:`SparkOutputFilter`).
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Conduit pipeline on Spark"

    def __init__(
        self,
        *,
        spark_conn_id: str = default_conn_name,
        conf: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, Any] | None = None,
        python: str | None = None,
        name: str | None = None,
        application: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        stop_timeout: float = 30.0,
        engine_exit_timeout: float = DEFAULT_ENGINE_EXIT_TIMEOUT,
    ) -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id
        self.conf = dict(conf or {})
        self.env_vars = {k: str(v) for k, v in (env_vars or {}).items()}
        self.python = python
        self.name = name
        self.application = application
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.stop_timeout = stop_timeout
        self.engine_exit_timeout = engine_exit_timeout
        self._spark_hook: ConduitSparkSubmitHook | None = None
        self._state: PipelineState | None = None
        self._engine_exited = False

    # command ------------------------------------------------------------------------------------
    @staticmethod
    def build_application_args(
        *, pipeline_file: str, pipeline_id: str, state_dir: str, mode: Mode = "until_idle"
    ) -> list[str]:
        """The engine's arguments after the application (DESIGN.md §4, ``run`` without ``--master``)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        args = [str(pipeline_file), "--pipeline", pipeline_id, "--state-dir", str(state_dir)]
        if mode == "until_idle":
            args.append("--until-idle")
        return args

    @staticmethod
    def build_cli_command(
        *, pipeline_file: str, pipeline_id: str, state_dir: str, mode: Mode = "until_idle", master: str
    ) -> list[str]:
        """The same run as a plain ``airflow-conduit run`` command line (for logs and docs)."""
        args = ConduitHook.build_application_args(
            pipeline_file=pipeline_file, pipeline_id=pipeline_id, state_dir=state_dir, mode=mode
        )
        return ["airflow-conduit", "run", args[0], *args[1:], "--master", master]

    def job_env(self) -> dict[str, str]:
        """The job's environment additions: ``PYSPARK_PYTHON``, a ``PATH`` that finds ``spark-submit``."""
        python = self.python or sys.executable
        env = {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
        binary = self.spark_submit_kwargs.get("spark_binary") or "spark-submit"
        if shutil.which(binary) is None:
            # The pip-installed pyspark puts spark-submit beside the interpreter, which may not be on PATH
            # when the worker was started without activating its virtualenv.
            bindir = Path(sys.executable).parent
            if (bindir / binary).exists():
                env["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
        env.update(self.env_vars)
        return env

    def get_spark_submit_hook(self, application_args: list[str], *, name: str) -> ConduitSparkSubmitHook:
        """A ``SparkSubmitHook`` for one submission."""
        kwargs = dict(self.spark_submit_kwargs)
        # The engine's GC and local-file settings (see airflow_conduit.engine.jvm), unless the
        # submission sets its own.
        # env_vars reach the executors too (spark.executorEnv): on a cluster they do not inherit the
        # driver's environment, and custom.python code there may read them.
        executor_env = {f"spark.executorEnv.{key}": value for key, value in self.env_vars.items()}
        hook = ConduitSparkSubmitHook(
            conf={**ENGINE_CONFS, **executor_env, **self.conf},
            conn_id=self.spark_conn_id,
            name=name,
            application_args=application_args,
            env_vars=self.job_env(),
            **kwargs,
        )
        # The deploy mode is known once the hook has read its connection. In client mode the driver
        # runs here, on the java checked: it may trim its native heap and map the class archive built
        # here; in cluster mode its JVM is elsewhere, of a version unknown here.
        cluster = hook._connection["deploy_mode"] == "cluster"
        hook._conf.setdefault(
            "spark.driver.extraJavaOptions", DRIVER_GC_OPTIONS if cluster else local_driver_options()
        )
        if not cluster:
            # The driver and its local Python processes import pyspark from its package, not its zip
            # (engine/python_startup.py); a cluster's driver has its own environment.
            env = hook._env_vars or {}
            python_path = with_worker_site(env.get("PYTHONPATH", os.environ.get("PYTHONPATH")))
            hook._env_vars = {**env, "PYTHONPATH": python_path}
        return hook

    def get_conn(self) -> SparkSubmitHook:
        return self.get_spark_submit_hook([], name=self.name or "conduit")

    @property
    def master(self) -> str:
        """The Spark master of the connection."""
        return self.get_conn()._connection["master"]

    # run ----------------------------------------------------------------------------------------
    def run_pipeline(
        self,
        *,
        pipeline_file: str,
        pipeline_id: str,
        state_dir: str,
        mode: Mode = "until_idle",
        stop_after: timedelta | float | None = None,
    ) -> PipelineRun:
        """Submit the pipeline, wait for it to end, and return how it ended (never raises on failure).

        :param pipeline_file: the pipeline file (Conduit format), as seen from the Spark driver
        :param pipeline_id: the pipeline to run
        :param state_dir: the state dir (checkpoints, status, exit payload, DLQ store)
        :param mode: ``until_idle`` (process what the sources hold now, then stop) or ``continuous``
        :param stop_after: request a graceful stop after this long (continuous mode)
        """
        state = PipelineState.of(state_dir, pipeline_id)
        self._state = state
        exit_before = _fingerprint(state.exit_file)
        dlq_before = dlq_tools.snapshot(state.dlq_dir)
        args = self.build_application_args(
            pipeline_file=pipeline_file, pipeline_id=pipeline_id, state_dir=state_dir, mode=mode
        )
        spark = self.get_spark_submit_hook(args, name=self.name or f"conduit-{pipeline_id}")
        self._spark_hook, self._engine_exited = spark, False
        submitted_at = datetime.now(UTC)
        stopper = None
        if stop_after is not None:
            seconds = stop_after.total_seconds() if isinstance(stop_after, timedelta) else float(stop_after)
            stopper = _StopAfter(self, state, seconds, submitted_at)
            stopper.start()
        self.log.info(
            "Submitting pipeline %s (%s) from %s to Spark master %s",
            pipeline_id,
            mode,
            pipeline_file,
            spark._connection["master"],
        )
        output_file = self._open_spark_output(state, spark)
        failure: AirflowException | None = None
        try:
            # A session of its own: every process of the engine is in it, to be ended as a whole.
            # No stdin: the task's is its supervisor's socket, which a lingering engine would keep open.
            spark.submit(
                application=self.application or engine_application(),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
            )
        except AirflowException as exc:  # a nonzero exit: classified below from the payload
            failure = exc
        finally:
            if stopper is not None:
                stopper.finish()
            spark.close_output()
        engine_pid = spark._submit_sp.pid if spark._submit_sp is not None else None
        self._wait_for_engine_exit()
        if output_file is not None:
            self.log.info("Spark output of this run: %s", output_file)
        ended_at = datetime.now(UTC)
        returncode = spark._submit_sp.returncode if spark._submit_sp is not None else None
        payload, source = self._read_payload(state, exit_before, spark, submitted_at)
        if payload is None:
            payload = self._synthesize_payload(
                pipeline_id, returncode, failure, spark, submitted_at, ended_at
            )
        elif returncode is not None and payload.exit_code != returncode:
            self.log.warning(
                "spark-submit exited with %s but the exit payload says %s; trusting the payload",
                returncode,
                payload.exit_code,
            )
        return PipelineRun(
            pipeline_id=pipeline_id,
            state_dir=str(state_dir),
            exit_payload=payload,
            payload_source=source,
            returncode=returncode,
            submitted_at=submitted_at,
            ended_at=ended_at,
            dlq_snapshot=dlq_before,
            engine_pid=engine_pid,
            spark_output_file=str(output_file) if output_file is not None else None,
        )

    # spark-submit's output and processes ---------------------------------------------------------
    def _open_spark_output(self, state: PipelineState, spark: ConduitSparkSubmitHook) -> Path | None:
        """Open this run's output file under ``logs/`` (dropping all but the newest files) for ``spark``.

        A state dir this process cannot write to costs only the file: the output is still in the task
        log at DEBUG.
        """
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = state.logs_dir / f"spark-submit-{stamp}.log"
        try:
            state.logs_dir.mkdir(parents=True, exist_ok=True)
            spark.output_file = path.open("x", encoding="utf-8", errors="backslashreplace", buffering=1)
            spark.output_path = path
        except OSError as error:
            self.log.warning("Cannot write spark-submit's output to %s: %s", path, error)
            return None
        prune_spark_outputs(state.logs_dir, SPARK_OUTPUT_FILES_KEPT)
        self.log.info("Spark output of this run: %s", path)
        return path

    def _engine_session(self) -> int | None:
        """The engine's session, unless it is known to be gone (its number may then be reused).

        spark-submit leads it (``start_new_session``): the session's id is spark-submit's pid.
        """
        spark = self._spark_hook
        if spark is None or spark._submit_sp is None or self._engine_exited:
            return None
        return spark._submit_sp.pid

    def _wait_for_engine_exit(self) -> None:
        """After spark-submit exited: wait up to ``engine_exit_timeout`` for the rest of the engine's
        processes to exit, then kill what is left, so that nothing of this run outlives it."""
        sid = self._engine_session()
        if sid is None:
            return
        deadline = time.monotonic() + self.engine_exit_timeout
        while engine_alive(sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if engine_alive(sid):
            self.log.warning(
                "The engine's processes %s were still running %gs after spark-submit exited; killing them",
                sorted(engine_processes(sid) or [sid]),
                self.engine_exit_timeout,
            )
            kill_engine(sid)
        self._engine_exited = True

    def _read_payload(
        self,
        state: PipelineState,
        exit_before: str | None,
        spark: ConduitSparkSubmitHook,
        submitted_at: datetime,
    ) -> tuple[ExitPayload | None, PayloadSource]:
        """This run's exit payload: ``exit.json`` if this run wrote it, else the output's payload line.

        ``exit.json`` counts only when rewritten by a run that started after this submission: a run
        refused by the pipeline's lock writes none, and the engine it was refused by may rewrite it
        meanwhile.
        """
        if _fingerprint(state.exit_file) not in (None, exit_before):
            try:
                payload = state.read_exit_payload()
            except ValueError:
                payload = None
            if isinstance(payload, dict) and "exit_code" in payload:
                written = ExitPayload.from_dict(payload)
                if _started_since(written, submitted_at):
                    return written, "state_dir"
        if spark.payload_line is not None:
            return ExitPayload.from_dict(spark.payload_line), "stdout"
        return None, "none"

    def _synthesize_payload(
        self,
        pipeline_id: str,
        returncode: int | None,
        failure: AirflowException | None,
        spark: ConduitSparkSubmitHook,
        submitted_at: datetime,
        ended_at: datetime,
    ) -> ExitPayload:
        """A payload for a run that left none: the job never got going, or died without a word.

        Exit code 2 (usage or config) is fatal; any other failure is transient, as in Conduit (the
        Spark master unreachable, the JVM killed, ...). A zero exit without a payload counts as a
        graceful stop.
        """
        if returncode in (EXIT_STOPPED, None) and failure is None:
            self.log.warning("The job exited with 0 but left no exit payload; treating it as stopped")
            return ExitPayload(
                pipeline=pipeline_id,
                status=Status.STOPPED,
                exit_code=EXIT_STOPPED,
                started_at=format_time(submitted_at),
                ended_at=format_time(ended_at),
            )
        message = f"spark-submit exited with {returncode} and no exit payload"
        last_line = next((line for line in reversed(spark.output_tail) if line.strip()), "")
        if last_line:
            message += f"; its last line: {last_line.strip()[:300]}"
        if spark.output_path is not None:
            message += f" (the whole output: {spark.output_path})"
        self.log.warning("%s", message)
        self.log.debug("The last output of spark-submit:\n%s", "\n".join(list(spark.output_tail)[-40:]))
        if returncode == EXIT_CONFIG:
            error, exit_code = PipelineError("fatal", Code.INVALID_CONFIG, message), EXIT_CONFIG
        else:
            error, exit_code = PipelineError("transient", Code.SPARK_FAILED, message), None
        return ExitPayload.failure(
            pipeline_id,
            error,
            exit_code=exit_code,
            started_at=format_time(submitted_at),
            ended_at=format_time(ended_at),
            spark_submit_returncode=returncode,
        )

    # stop ---------------------------------------------------------------------------------------
    def _request_stop(self, state: PipelineState, reason: str) -> None:
        self.log.info("Requesting a graceful stop of pipeline %s (%s)", state.pipeline_id, reason)
        state.request_stop()

    def on_kill(self) -> None:
        """Stop the running job: a graceful stop first; after ``stop_timeout`` the Spark provider's kill
        (spark-submit, and a driver on a cluster), then a SIGKILL of whatever is left of the engine's
        session (the Python driver and workers outlive a killed spark-submit)."""
        spark, state = self._spark_hook, self._state
        if spark is None:
            return
        process = spark._submit_sp
        if state is not None and process is not None and process.poll() is None:
            self._request_stop(state, "task killed")
            deadline = time.monotonic() + self.stop_timeout
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        spark.on_kill()
        sid = self._engine_session()
        if sid is not None and engine_alive(sid):
            self.log.info("Killing the engine's processes %s", sorted(engine_processes(sid) or [sid]))
            kill_engine(sid)

    def test_connection(self) -> tuple[bool, str]:
        """Whether the connection resolves and ``spark-submit`` can be found."""
        try:
            spark = self.get_conn()
        except Exception as exc:
            return False, str(exc)
        binary = spark._connection["spark_binary"]
        env_path = self.job_env().get("PATH", os.environ.get("PATH", ""))
        if shutil.which(binary, path=env_path) is None:
            return False, f"{binary} not found on PATH"
        return True, f"master {spark._connection['master']}, {binary} found"


class _StopAfter(threading.Thread):
    """Requests a graceful stop once the pipeline has been running for ``seconds``.

    The clock starts when the run reports ``running`` (Spark's start-up does not count), and the
    request is renewed until the job exits: the engine clears stale stop requests when it starts.
    """

    def __init__(self, hook: ConduitHook, state: PipelineState, seconds: float, submitted_at: datetime):
        super().__init__(name=f"conduit-stop-after-{state.pipeline_id}", daemon=True)
        self.hook, self.state, self.seconds, self.submitted_at = hook, state, seconds, submitted_at
        self.done = threading.Event()
        self.requested = False

    def _running_since(self) -> float | None:
        status = self.state.read_status() or {}
        if status.get("status") != Status.RUNNING:
            return None
        try:
            updated = datetime.fromisoformat(str(status.get("updated_at", "")).replace("Z", "+00:00"))
        except ValueError:
            return None
        return time.monotonic() if updated >= self.submitted_at else None

    def run(self) -> None:
        deadline = None
        while not self.done.wait(1.0):
            if deadline is None:
                since = self._running_since()
                if since is not None:
                    deadline = since + self.seconds
            elif time.monotonic() >= deadline and not self.state.stop_requested:
                if not self.requested:
                    self.hook._request_stop(self.state, f"ran for {self.seconds:g}s (stop_after)")
                else:
                    self.state.request_stop()
                self.requested = True

    def finish(self) -> None:
        self.done.set()
        self.join(timeout=5)
        if self.requested:
            self.state.clear_stop_request()


def _started_since(payload: ExitPayload, moment: datetime) -> bool:
    try:
        return parse_time(payload.started_at or "") >= moment
    except (TypeError, ValueError):
        return True  # a payload without a start time: trust the rewrite, as before
