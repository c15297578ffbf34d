"""Submit a Conduit pipeline to Spark through the Spark provider's ``SparkSubmitHook``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

import airflow_conduit
from airflow_conduit import dlq_tools
from airflow_conduit.engine.jvm import DRIVER_GC_OPTIONS
from airflow_conduit.errors import EXIT_CONFIG, EXIT_STOPPED, EXIT_TRANSIENT, Code
from airflow_conduit.recovery.runner import Outcome, classify
from airflow_conduit.state import PipelineState

Mode = Literal["until_idle", "continuous"]
MODES: tuple[str, ...] = ("until_idle", "continuous")
PayloadSource = Literal["state_dir", "stdout", "none"]


def engine_application() -> str:
    """The path of the engine's spark-submit entry point, ``airflow_conduit/engine/job.py``.

    Found without importing the engine (which imports pyspark).
    """
    return str(Path(airflow_conduit.__file__).resolve().parent / "engine" / "job.py")


def parse_payload_line(line: str) -> dict[str, Any] | None:
    """The exit payload if ``line`` is one (a JSON object with ``pipeline`` and ``exit_code``)."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict) and "exit_code" in data and "pipeline" in data:
        return data
    return None


@dataclass
class PipelineRun:
    """One submission of a pipeline and how it ended."""

    pipeline_id: str
    state_dir: str
    payload: dict[str, Any]
    """The exit payload; synthesised from the exit code when the job left none."""
    payload_source: PayloadSource
    returncode: int | None
    submitted_at: datetime
    ended_at: datetime
    dlq_snapshot: dict[str, int] = field(default_factory=dict)
    """DLQ line counts before the run: what lies beyond them is this run's DLQ records."""

    @property
    def exit_code(self) -> int:
        return int(self.payload.get("exit_code", EXIT_TRANSIENT))

    @property
    def outcome(self) -> Outcome:
        return classify(self.payload)

    @property
    def records(self) -> dict[str, Any]:
        return dict(self.payload.get("records") or {})

    @property
    def duration(self) -> timedelta:
        return self.ended_at - self.submitted_at


class _ConduitSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` that also keeps the job's exit-payload line and the tail of its output."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.payload_line: dict[str, Any] | None = None
        self.output_tail: deque[str] = deque(maxlen=200)

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(self._tee(itr))

    def _tee(self, itr: Iterator[Any]) -> Iterator[Any]:
        for line in itr:
            self.output_tail.append(line.rstrip("\n"))
            payload = parse_payload_line(line)
            if payload is not None:
                self.payload_line = payload
            yield line


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
        defaults to the engine's GC setting (:data:`~airflow_conduit.engine.jvm.DRIVER_GC_OPTIONS`)
    :param env_vars: extra environment of the job (e.g. for ``${VAR}`` in the pipeline file)
    :param python: the Python of the driver and the executors (default: this interpreter)
    :param name: the Spark application name (default ``conduit-PIPELINE_ID``)
    :param application: the engine entry point (default :func:`engine_application`)
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (``driver_memory``, ``jars``, ...)
    :param stop_timeout: seconds :meth:`on_kill` waits for a graceful stop before killing the job
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
        self._spark_hook: _ConduitSparkSubmitHook | None = None
        self._state: PipelineState | None = None

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

    def get_spark_submit_hook(self, application_args: list[str], *, name: str) -> SparkSubmitHook:
        """A ``SparkSubmitHook`` for one submission."""
        kwargs = dict(self.spark_submit_kwargs)
        # The engine's GC setting (see airflow_conduit.engine.jvm), unless the submission sets its own.
        conf = {"spark.driver.extraJavaOptions": DRIVER_GC_OPTIONS, **self.conf}
        return _ConduitSparkSubmitHook(
            conf=conf,
            conn_id=self.spark_conn_id,
            name=name,
            application_args=application_args,
            env_vars=self.job_env(),
            **kwargs,
        )

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
        self._spark_hook = spark
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
        failure: AirflowException | None = None
        try:
            spark.submit(application=self.application or engine_application())
        except AirflowException as exc:  # a nonzero exit: classified below from the payload
            failure = exc
        finally:
            if stopper is not None:
                stopper.finish()
        ended_at = datetime.now(UTC)
        returncode = spark._submit_sp.returncode if spark._submit_sp is not None else None
        payload, source = self._read_payload(state, exit_before, spark)
        if payload is None:
            payload = self._synthesize_payload(
                pipeline_id, returncode, failure, spark, submitted_at, ended_at
            )
        elif returncode is not None and int(payload.get("exit_code", returncode)) != returncode:
            self.log.warning(
                "spark-submit exited with %s but the exit payload says %s; trusting the payload",
                returncode,
                payload.get("exit_code"),
            )
        return PipelineRun(
            pipeline_id=pipeline_id,
            state_dir=str(state_dir),
            payload=payload,
            payload_source=source,
            returncode=returncode,
            submitted_at=submitted_at,
            ended_at=ended_at,
            dlq_snapshot=dlq_before,
        )

    def _read_payload(
        self, state: PipelineState, exit_before: str | None, spark: _ConduitSparkSubmitHook
    ) -> tuple[dict[str, Any] | None, PayloadSource]:
        if _fingerprint(state.exit_file) not in (None, exit_before):
            try:
                payload = state.read_exit_payload()
            except ValueError:
                payload = None
            if isinstance(payload, dict) and "exit_code" in payload:
                return payload, "state_dir"
        if spark.payload_line is not None:
            return spark.payload_line, "stdout"
        return None, "none"

    def _synthesize_payload(
        self,
        pipeline_id: str,
        returncode: int | None,
        failure: AirflowException | None,
        spark: _ConduitSparkSubmitHook,
        submitted_at: datetime,
        ended_at: datetime,
    ) -> dict[str, Any]:
        """A payload for a run that left none: the job never got going, or died without a word.

        Exit code 2 (usage or config) is fatal; any other failure is transient, as in Conduit (the
        Spark master unreachable, the JVM killed, ...). A zero exit without a payload counts as a
        graceful stop.
        """
        tail = "\n".join(list(spark.output_tail)[-20:])
        if returncode in (EXIT_STOPPED, None) and failure is None:
            self.log.warning("The job exited with 0 but left no exit payload; treating it as stopped")
            return {
                "pipeline": pipeline_id,
                "status": "stopped",
                "exit_code": EXIT_STOPPED,
                "error": None,
                "records": {},
                "started_at": _iso(submitted_at),
                "ended_at": _iso(ended_at),
            }
        if returncode == EXIT_CONFIG:
            kind, code, status, exit_code = "fatal", Code.INVALID_CONFIG, "degraded", EXIT_CONFIG
        else:
            kind, code, status, exit_code = "transient", Code.SPARK_FAILED, "failed", EXIT_TRANSIENT
        message = f"spark-submit exited with {returncode} and no exit payload"
        if tail:
            message += f"; last output:\n{tail}"
        self.log.warning("%s", message)
        return {
            "pipeline": pipeline_id,
            "status": status,
            "exit_code": exit_code,
            "error": {"kind": kind, "code": code, "message": message, "node": None},
            "records": {},
            "started_at": _iso(submitted_at),
            "ended_at": _iso(ended_at),
            "spark_submit_returncode": returncode,
        }

    # stop ---------------------------------------------------------------------------------------
    def _request_stop(self, state: PipelineState, reason: str) -> None:
        self.log.info("Requesting a graceful stop of pipeline %s (%s)", state.pipeline_id, reason)
        state.request_stop()

    def on_kill(self) -> None:
        """Stop the running job: a graceful stop first, the Spark provider's kill after ``stop_timeout``."""
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
        if status.get("status") != "running":
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


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
