"""Submit a Conduit pipeline to Spark through the Spark provider's ``SparkSubmitHook``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TextIO

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

SPARK_OUTPUT_FILES_KEPT = 20
"""How many ``spark-submit-*.log`` files a pipeline's ``logs/`` dir keeps (the newest)."""
DEFAULT_ENGINE_EXIT_TIMEOUT = 30.0
"""Seconds :meth:`ConduitHook.run_pipeline` waits for the engine's processes after spark-submit exited."""


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
    engine_pid: int | None = None
    """The pid of spark-submit, which led the engine's session (every process of it had exited
    before the run returned)."""
    spark_output_file: str | None = None
    """The file that holds every line spark-submit printed in this run."""

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


# spark-submit's output ---------------------------------------------------------------------------
# A record of the engine's Python logging (cli._setup_logging), from one of its airflow_conduit loggers.
_ENGINE_RECORD = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) airflow_conduit[\w.]*: "
)
_ENGINE_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING}
# Lines that are never part of the end-of-run summary: log4j records (Spark's default layout and the
# engine's log4j2.properties), other Python loggers, Java and Python traces.
_NOT_SUMMARY = re.compile(
    r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} |\s+at |\s*\.\.\. \d+ more"
    r"|Caused by: |Traceback \(most recent call last\)|\s*File \")"
)
# The summary table's title (cli.print_summary), with all whitespace removed: rich wraps it to the
# table's width, so it may come as several lines.
_SUMMARY_TITLE = re.compile(r"^pipeline\S+:\w+\(exit-?\d+\)$")
_TITLE_START = re.compile(r"^\s*pipeline(\s|$)")
_SUMMARY_TITLE_LINES = 6


class SparkOutputFilter:
    """Sorts spark-submit's output lines into what the task log shows at INFO and what only at DEBUG.

    A person reading the task log needs the engine's own log records (progress, warnings, errors, at
    their own level) and its end-of-run summary (``cli.print_summary``: a table under the title
    ``pipeline ID: STATUS (exit N)``, an error line, the DLQ's path). Everything else (Spark's log4j
    records, Java and Py4J traces, the continuation lines of multi-line records, the exit-payload line)
    goes to DEBUG: it is all in the run's output file. The summary starts at its title, which is only
    known to be one when the table's top border follows, so a few lines may be held back until then;
    it ends at the next engine record or exit-payload line.
    """

    def __init__(self) -> None:
        self._held: list[str] = []
        self._in_summary = False

    def feed(self, line: str) -> list[tuple[int, str]]:
        """The (level, text) records for one more output line, in order (maybe none yet)."""
        text = line.rstrip()
        if not self._held:
            return self._sort(text)
        if text.lstrip().startswith("\u250f") and _is_summary_title(self._held):  # the table's top border
            title = " ".join(held.strip() for held in self._held)
            self._held = []
            self._in_summary = True
            return [(logging.INFO, title), (logging.INFO, text)]
        if len(self._held) < _SUMMARY_TITLE_LINES and not self._ends_title(text):
            self._held.append(text)
            return []
        return self.flush() + self._sort(text)

    def flush(self) -> list[tuple[int, str]]:
        """The records of lines held back (at the end of the output, or once they are no title)."""
        held, self._held = self._held, []
        return [(self._plain_level(text), text) for text in held]

    def _sort(self, text: str) -> list[tuple[int, str]]:
        engine = _ENGINE_RECORD.match(text)
        if engine:
            self._in_summary = False
            return [(_ENGINE_LEVELS.get(engine.group(1), logging.ERROR), text)]
        if parse_payload_line(text) is not None:
            self._in_summary = False
            return [(logging.DEBUG, text)]
        if _TITLE_START.match(text):
            self._held = [text]  # perhaps the title of a summary
            return []
        return [(self._plain_level(text), text)]

    def _plain_level(self, text: str) -> int:
        return logging.INFO if self._in_summary and not _NOT_SUMMARY.match(text) else logging.DEBUG

    @staticmethod
    def _ends_title(text: str) -> bool:
        return bool(_ENGINE_RECORD.match(text) or _NOT_SUMMARY.match(text) or parse_payload_line(text))


def _is_summary_title(lines: list[str]) -> bool:
    return bool(_SUMMARY_TITLE.match(re.sub(r"\s+", "", "".join(lines))))


class _OutputEcho:
    """The logger ``SparkSubmitHook`` gets while it reads spark-submit's output.

    The provider logs every output line at INFO (``log.info(line)``); that echo is dropped here, as
    :class:`_ConduitSparkSubmitHook` has logged the line at the level :class:`SparkOutputFilter` gave
    it. Every other message (``Identified spark driver id: ...``) passes to the real logger.
    """

    def __init__(self, log: Any, hook: _ConduitSparkSubmitHook) -> None:
        self._log = log
        self._hook = hook

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs or msg != self._hook.echo:
            self._log.info(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


class _ConduitSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` that keeps the job's exit-payload line and the tail of its output, writes the
    whole output to ``output_file``, and logs each line at the level :class:`SparkOutputFilter` gives it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.payload_line: dict[str, Any] | None = None
        self.output_tail: deque[str] = deque(maxlen=200)
        self.output_file: TextIO | None = None
        self.echo: str | None = None
        """The current output line as the provider echoes it (stripped)."""
        self._filter = SparkOutputFilter()

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        task_log = self.log
        self._log = _OutputEcho(task_log, self)  # LoggingMixin's logger, for the provider's parsing
        try:
            super()._process_spark_submit_log(self._tee(itr, task_log))
        finally:
            self._log = task_log
            self._emit(task_log, self._filter.flush())

    def _tee(self, itr: Iterator[Any], task_log: Any) -> Iterator[Any]:
        for line in itr:
            self._write_output(line)
            self.output_tail.append(line.rstrip("\n"))
            payload = parse_payload_line(line)
            if payload is not None:
                self.payload_line = payload
            self.echo = line.strip()
            self._emit(task_log, self._filter.feed(line))
            yield line

    @staticmethod
    def _emit(task_log: Any, records: list[tuple[int, str]]) -> None:
        for level, text in records:
            task_log.log(level, "%s", text)

    def _write_output(self, line: str) -> None:
        if self.output_file is None:
            return
        try:
            self.output_file.write(line if line.endswith("\n") else line + "\n")
        except OSError as error:  # a full disk: the task log still has every line at DEBUG
            self.output_file = None
            self.log.warning("Cannot write spark-submit's output to its file: %s", error)

    def close_output(self) -> None:
        output, self.output_file = self.output_file, None
        if output is not None:
            output.close()


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
        self._spark_hook: _ConduitSparkSubmitHook | None = None
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
            spark.submit(application=self.application or engine_application(), start_new_session=True)
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
            engine_pid=engine_pid,
            spark_output_file=str(output_file) if output_file is not None else None,
        )

    # spark-submit's output and processes ---------------------------------------------------------
    def _open_spark_output(self, state: PipelineState, spark: _ConduitSparkSubmitHook) -> Path | None:
        """Open this run's output file under ``logs/`` (dropping all but the newest files) for ``spark``.

        A state dir this process cannot write to costs only the file: the output is still in the task
        log at DEBUG.
        """
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = state.logs_dir / f"spark-submit-{stamp}.log"
        try:
            state.logs_dir.mkdir(parents=True, exist_ok=True)
            spark.output_file = path.open("x", encoding="utf-8", errors="backslashreplace", buffering=1)
        except OSError as error:
            self.log.warning("Cannot write spark-submit's output to %s: %s", path, error)
            return None
        _prune_spark_outputs(state.logs_dir, SPARK_OUTPUT_FILES_KEPT)
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
        while _engine_alive(sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _engine_alive(sid):
            self.log.warning(
                "The engine's processes %s were still running %gs after spark-submit exited; killing them",
                sorted(_engine_processes(sid) or [sid]),
                self.engine_exit_timeout,
            )
            _kill_engine(sid)
        self._engine_exited = True

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
        if sid is not None and _engine_alive(sid):
            self.log.info("Killing the engine's processes %s", sorted(_engine_processes(sid) or [sid]))
            _kill_engine(sid)

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


def _prune_spark_outputs(directory: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` output files (their names sort by time)."""
    for old in sorted(directory.glob("spark-submit-*.log"))[:-keep]:
        old.unlink(missing_ok=True)


def _engine_processes(sid: int) -> dict[int, int] | None:
    """The live processes of the engine's session, as pid: process group (``None`` without ``/proc``).

    A session, not a process group: PySpark's worker daemon makes a group of its own (``os.setpgid``)
    but stays in the session. Zombies are not counted: where nothing reaps orphans (an init that
    does not), exited processes stay in the table for good.
    """
    if not os.path.exists("/proc/self/stat"):
        return None
    processes = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": state ppid pgrp session ...
        if len(fields) > 3 and fields[0] != "Z" and fields[3] == str(sid):
            processes[int(entry)] = int(fields[2])
    return processes


def _engine_alive(sid: int) -> bool:
    processes = _engine_processes(sid)
    if processes is not None:
        return bool(processes)
    try:  # without /proc: the group spark-submit led
        os.killpg(sid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_engine(sid: int, wait: float = 10.0) -> None:
    """SIGKILL every process of the engine's session, group by group (a group of a session member
    lies within the session), until none is left or ``wait`` seconds passed."""
    deadline = time.monotonic() + wait
    while _engine_alive(sid) and time.monotonic() < deadline:
        processes = _engine_processes(sid)
        for group in {sid} if processes is None else set(processes.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        time.sleep(0.05)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
