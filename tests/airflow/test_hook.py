"""ConduitHook: the command it builds, and how it reads a run's end, through real spark-submit.

The application is ``fake_engine.py`` (the engine's arguments, scripted outcomes), so each submission
costs only spark-submit's JVM start (~2 s); ``lingering_engine.py`` leaves a process behind. The tests
marked ``engine`` run the real engine on local Spark: what the task log shows of a failing run, and
that no process of the engine outlives ``run_pipeline`` or ``on_kill``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import structlog
from conftest import HERE, SPARK_CONN

from airflow_conduit.engine.jvm import (
    ARCHIVE_ENV,
    DRIVER_GC_OPTIONS,
    ENGINE_CONFS,
    TRIM_NATIVE_HEAP_OPTIONS,
    archive_options,
    driver_jvm_options,
    local_driver_options,
)
from airflow_conduit.engine.python_startup import with_worker_site
from airflow_conduit.hooks.conduit import ConduitHook, PipelineRun, engine_application, parse_payload_line
from airflow_conduit.state import PipelineState

FAKE = str(HERE / "fake_engine.py")


@pytest.fixture
def hook(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_CONN)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return ConduitHook(application=FAKE)


def scenario(tmp_path, *runs) -> str:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"runs": list(runs)}))
    return str(path)


def test_application_args():
    args = ConduitHook.build_application_args(pipeline_file="p.yaml", pipeline_id="orders", state_dir="/s")
    assert args == ["p.yaml", "--pipeline", "orders", "--state-dir", "/s", "--until-idle"]
    args = ConduitHook.build_application_args(
        pipeline_file="p.yaml", pipeline_id="orders", state_dir="/s", mode="continuous"
    )
    assert "--until-idle" not in args
    with pytest.raises(ValueError):
        ConduitHook.build_application_args(pipeline_file="p", pipeline_id="o", state_dir="/s", mode="forever")
    cli = ConduitHook.build_cli_command(
        pipeline_file="p.yaml", pipeline_id="o", state_dir="/s", master="local[*]"
    )
    assert cli == [
        "airflow-conduit",
        "run",
        "p.yaml",
        "--pipeline",
        "o",
        "--state-dir",
        "/s",
        "--until-idle",
        "--master",
        "local[*]",
    ]


def test_engine_application_is_the_spark_submit_entry():
    assert engine_application().endswith("airflow_conduit/cli/spark_submit.py")


def test_submission_carries_the_engine_settings_unless_conf_sets_its_own(hook):
    conf = hook.get_spark_submit_hook([], name="n")._conf
    assert conf == {"spark.driver.extraJavaOptions": local_driver_options(), **ENGINE_CONFS}
    assert conf["spark.driver.extraJavaOptions"].startswith(driver_jvm_options())
    # This machine's java knows the native heap's trimming (CI installs Debian's current 17).
    assert TRIM_NATIVE_HEAP_OPTIONS in conf["spark.driver.extraJavaOptions"]
    # In cluster mode the driver's JVM is another machine's, of a version unknown here.
    cluster = ConduitHook(application=FAKE, spark_submit_kwargs={"deploy_mode": "cluster"})
    conf = cluster.get_spark_submit_hook([], name="n")._conf
    assert conf["spark.driver.extraJavaOptions"] == DRIVER_GC_OPTIONS
    marker = "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs"
    own = {"spark.driver.extraJavaOptions": "-Dx=1", "spark.a": "b", marker: "true"}
    conf = ConduitHook(application=FAKE, conf=own).get_spark_submit_hook([], name="n")._conf
    assert conf == {**ENGINE_CONFS, **own}


def test_a_client_mode_driver_maps_the_class_archive_built_here(hook, monkeypatch, tmp_path):
    """Measured under spark-submit, 1,000 records, 2 cores: 19.6-21.2 s a run with the archive against
    25.8-27.0 s without (engine/class_archive.py)."""
    built = tmp_path / "driver.archive"
    built.write_bytes(b"archive")
    monkeypatch.setenv(ARCHIVE_ENV, str(built))
    mapping = archive_options()
    assert str(built) in mapping
    client = hook.get_spark_submit_hook([], name="n")._conf
    assert client["spark.driver.extraJavaOptions"] == f"{driver_jvm_options()} {mapping}"
    # A cluster's driver is another machine's JVM, and the archive is this one's.
    cluster = ConduitHook(application=FAKE, spark_submit_kwargs={"deploy_mode": "cluster"})
    assert (
        cluster.get_spark_submit_hook([], name="n")._conf["spark.driver.extraJavaOptions"]
        == DRIVER_GC_OPTIONS
    )
    monkeypatch.setenv(ARCHIVE_ENV, "off")
    client = hook.get_spark_submit_hook([], name="n")._conf
    assert client["spark.driver.extraJavaOptions"] == driver_jvm_options()


def test_env_vars_reach_the_executors_of_a_cluster_too():
    """On a standalone cluster executors do not inherit the driver's environment (seen in make deploy)."""
    hook = ConduitHook(application=FAKE, env_vars={"FLAKY_MARKER": "/m"}, conf={"spark.executorEnv.X": "own"})
    conf = hook.get_spark_submit_hook([], name="n")._conf
    assert conf["spark.executorEnv.FLAKY_MARKER"] == "/m" and conf["spark.executorEnv.X"] == "own"


def test_a_driver_here_gets_the_worker_site_first_on_its_python_path(hook, monkeypatch):
    """Its Python processes then import pyspark from its package (engine/python_startup.py)."""
    monkeypatch.setenv("PYTHONPATH", "/from/the/worker")
    assert hook.get_spark_submit_hook([], name="n")._env_vars["PYTHONPATH"] == with_worker_site(
        "/from/the/worker"
    )
    own = ConduitHook(application=FAKE, env_vars={"PYTHONPATH": "/own"})
    assert own.get_spark_submit_hook([], name="n")._env_vars["PYTHONPATH"] == with_worker_site("/own")
    cluster = ConduitHook(application=FAKE, spark_submit_kwargs={"deploy_mode": "cluster"})
    assert "PYTHONPATH" not in cluster.get_spark_submit_hook([], name="n")._env_vars


def test_job_env_sets_pyspark_python(hook):
    env = ConduitHook(python="/opt/py/bin/python", env_vars={"X": 1}).job_env()
    assert env["PYSPARK_PYTHON"] == "/opt/py/bin/python" and env["X"] == "1"
    assert hook.job_env()["PYSPARK_PYTHON"] == sys.executable


def test_master_from_connection(hook):
    assert hook.master == "local[2]"
    ok, message = hook.test_connection()
    assert ok, message


def test_parse_payload_line():
    assert parse_payload_line('{"pipeline": "p", "exit_code": 0}') == {"pipeline": "p", "exit_code": 0}
    assert parse_payload_line("INFO something") is None
    assert parse_payload_line('{"other": 1}') is None


def test_graceful_run_reads_state_dir_payload(hook, tmp_path):
    run = hook.run_pipeline(
        pipeline_file=scenario(tmp_path, {"exit_code": 0, "records": {"read": 4, "acked": 4}}),
        pipeline_id="p",
        state_dir=str(tmp_path / "state"),
    )
    assert run.returncode == 0 and run.exit_code == 0 and run.outcome == "stopped"
    assert run.payload_source == "state_dir" and run.records["acked"] == 4


def test_transient_exit_code_and_payload(hook, tmp_path):
    run = hook.run_pipeline(
        pipeline_file=scenario(
            tmp_path,
            {"exit_code": 75, "error": {"kind": "transient", "code": "source_failed", "message": "x"}},
        ),
        pipeline_id="p",
        state_dir=str(tmp_path / "state"),
    )
    assert run.returncode == 75 and run.outcome == "transient"
    assert run.payload["error"]["code"] == "source_failed"


def test_payload_from_stdout_when_state_dir_not_rewritten(hook, tmp_path):
    state = PipelineState.of(tmp_path / "state", "p")
    state.write_exit_payload({"pipeline": "p", "exit_code": 0, "status": "stopped"})  # a stale one
    run = hook.run_pipeline(
        pipeline_file=scenario(
            tmp_path,
            {
                "exit_code": 1,
                "write_exit_json": False,
                "error": {"kind": "fatal", "code": "processor_fatal", "message": "bad"},
            },
        ),
        pipeline_id="p",
        state_dir=str(tmp_path / "state"),
    )
    assert run.payload_source == "stdout" and run.outcome == "fatal" and run.exit_code == 1


def test_an_exit_payload_written_by_another_engine_meanwhile_is_not_taken(hook, tmp_path):
    """A run refused by the lock writes no exit.json; the engine holding the lock may end meanwhile
    and write its own. That one started before this submission, so the run's own payload line wins."""
    theirs = {"pipeline": "p", "status": "stopped", "exit_code": 0, "started_at": "2026-01-01T00:00:00Z"}
    refused = {"kind": "transient", "code": "pipeline_locked", "message": "pipeline p is already running"}
    run = hook.run_pipeline(
        pipeline_file=scenario(
            tmp_path,
            {"exit_code": 75, "write_exit_json": False, "foreign_exit_json": theirs, "error": refused},
        ),
        pipeline_id="p",
        state_dir=str(tmp_path / "state"),
    )
    assert run.payload_source == "stdout" and run.outcome == "transient"
    assert run.payload["error"]["code"] == "pipeline_locked"


@pytest.mark.parametrize(
    ("code", "outcome"), [(2, "fatal"), (75, "transient"), (1, "transient"), (0, "stopped")]
)
def test_no_payload_at_all_is_classified_from_the_exit_code(hook, tmp_path, code, outcome):
    run = hook.run_pipeline(
        pipeline_file=scenario(
            tmp_path, {"exit_code": code, "write_exit_json": False, "print_payload": False}
        ),
        pipeline_id="p",
        state_dir=str(tmp_path / "state"),
    )
    assert run.payload_source == "none" and run.returncode == code
    assert run.outcome == outcome
    if code:
        message = run.payload["error"]["message"]
        assert "spark-submit exited with" in message and "fake engine: some progress output" in message
        assert f"(the whole output: {run.spark_output_file})" in message


def test_spark_submit_that_cannot_start_is_transient(monkeypatch, tmp_path):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "nowhere://x"})
    )
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{__import__('os').environ['PATH']}")
    run = ConduitHook(application=FAKE).run_pipeline(
        pipeline_file=scenario(tmp_path, {"exit_code": 0}), pipeline_id="p", state_dir=str(tmp_path / "s")
    )
    assert run.outcome == "transient" and run.payload["error"]["code"] == "spark_failed"


# spark-submit's output and the engine's processes ------------------------------------------------
LINGERING = str(HERE / "lingering_engine.py")
HOOK_LOGGERS = (
    "airflow.task.hooks.airflow_conduit.hooks."  # conduit.ConduitHook, spark_output.ConduitSparkSubmitHook
)
TRACE = ("at ", "java.", "py4j", "Traceback", "Caused by:", "File ", "org.apache")


def _event_only(logger, method_name, event_dict):
    return event_dict["event"]  # the message alone, as logging's record message


@pytest.fixture
def task_log(caplog):
    """The hooks' records in ``caplog``: Airflow's loggers are structlog's, routed to logging here."""
    previous = structlog.get_config()
    structlog.configure(
        processors=[structlog.stdlib.PositionalArgumentsFormatter(), _event_only],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    caplog.set_level(logging.DEBUG, logger=HOOK_LOGGERS.rstrip("."))
    yield caplog
    structlog.configure(**previous)


def hook_records(caplog, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(HOOK_LOGGERS) and r.levelno >= level]


def proc_stat(pid: int) -> list[str] | None:
    """``state ppid pgrp session ... starttime`` of a process, ``None`` when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int, started: str | None = None) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z" and (started is None or stat[19] == started)


def session_processes(sid: int) -> list[int]:
    """The live processes of a session (the test's own look, independent of the hook's)."""
    return [
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and (s := proc_stat(int(p))) and s[0] != "Z" and s[3] == str(sid)
    ]


class ProcessWatch(threading.Thread):
    """Records every process under spark-submit (pid: start time) while a run goes on."""

    def __init__(self, hook: ConduitHook) -> None:
        super().__init__(daemon=True)
        self.hook, self.seen, self.done = hook, {}, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            spark = self.hook._spark_hook
            if spark is not None and spark._submit_sp is not None:
                self.seen.update(descendants(spark._submit_sp.pid))

    def stop(self) -> dict[int, str]:
        self.done.set()
        self.join()
        return self.seen

    def left(self) -> list[int]:
        return [pid for pid, started in self.seen.items() if alive(pid, started)]


def descendants(root: int) -> dict[int, str]:
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := proc_stat(int(p)))}
    found, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, stat in stats.items():
            if int(stat[1]) == parent and pid not in found:
                found[pid] = stat[19]
                todo.append(pid)
    return found


def lingering(tmp_path, seconds: float) -> tuple[str, Path]:
    pid_file = tmp_path / "child.pid"
    path = tmp_path / "linger.json"
    path.write_text(json.dumps({"linger": seconds, "pid_file": str(pid_file)}))
    return str(path), pid_file


def test_run_waits_for_the_processes_the_engine_leaves_behind(hook, tmp_path, task_log):
    hook.application = LINGERING
    pipeline_file, pid_file = lingering(tmp_path, 3)
    run = hook.run_pipeline(pipeline_file=pipeline_file, pipeline_id="p", state_dir=str(tmp_path / "s"))
    child = int(pid_file.read_text())
    assert not alive(child)
    assert run.engine_pid is not None and session_processes(run.engine_pid) == []
    assert not hook_records(task_log, logging.WARNING)  # it exited by itself


def test_run_kills_what_the_engine_left_after_engine_exit_timeout(hook, tmp_path, task_log):
    hook.application, hook.engine_exit_timeout = LINGERING, 1.0
    pipeline_file, pid_file = lingering(tmp_path, 600)
    started = time.monotonic()
    run = hook.run_pipeline(pipeline_file=pipeline_file, pipeline_id="p", state_dir=str(tmp_path / "s"))
    assert time.monotonic() - started < 60
    assert not alive(int(pid_file.read_text()))
    assert run.engine_pid is not None and session_processes(run.engine_pid) == []
    warnings = hook_records(task_log, logging.WARNING)
    assert len(warnings) == 1 and "still running 1s after spark-submit exited" in warnings[0]


def test_spark_output_goes_to_a_file_of_which_the_newest_20_are_kept(hook, tmp_path, task_log):
    logs = PipelineState.of(tmp_path / "state", "p").logs_dir
    logs.mkdir(parents=True)
    for day in range(1, 26):
        (logs / f"spark-submit-202601{day:02d}T000000.000000Z.log").write_text("old\n")
    run = hook.run_pipeline(
        pipeline_file=scenario(tmp_path, {"exit_code": 0}), pipeline_id="p", state_dir=str(tmp_path / "state")
    )
    files = sorted(logs.glob("spark-submit-*.log"))
    assert len(files) == 20 and files[0].name == "spark-submit-20260107T000000.000000Z.log"
    assert run.spark_output_file == str(files[-1])
    output = files[-1].read_text()
    assert "fake engine: some progress output" in output
    assert parse_payload_line(output.splitlines()[-1])["exit_code"] == 0
    shown = hook_records(task_log)
    assert shown.count(f"Spark output of this run: {files[-1]}") == 2
    assert not [line for line in shown if "fake engine" in line or line.startswith("{")]
    assert "fake engine: some progress output" in hook_records(task_log, logging.DEBUG)


# The real engine ---------------------------------------------------------------------------------
HELPERS = '''\
import os
import time

HERE = os.path.dirname(__file__)


def ledger(records, delivery_hash):
    """A custom.python destination that takes the first micro-batch and fails on the second."""
    calls = os.path.join(HERE, "calls")
    earlier = os.path.exists(calls)
    open(calls, "a").close()
    if earlier:
        raise ValueError("boom: the ledger is down")


def slow(record):
    """A processor that tells the test a batch is in flight, then takes 0.5 s per record."""
    open(os.path.join(HERE, "in-flight"), "w").close()
    time.sleep(0.5)
    return record
'''

PIPELINE = """version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {{recordCount: {records}, maxRecordsPerBatch: 10}}}}
      - {destination}
"""


@pytest.fixture
def engine_hook(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_CONN)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return ConduitHook(stop_timeout=2.0)


def pipeline(tmp_path, *, records: int, destination: str, processor: str | None = None) -> str:
    """A generator of ``records`` in batches of 10 into ``destination``, through ``helpers:processor``."""
    (tmp_path / "helpers.py").write_text(HELPERS)
    text = PIPELINE.format(records=records, destination=destination)
    if processor:
        settings = f'{{function: "helpers:{processor}", path: "{tmp_path}"}}'
        text += f"    processors:\n      - {{id: proc, plugin: custom.python, settings: {settings}}}\n"
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return str(path)


def start_slow_run(hook: ConduitHook, tmp_path) -> tuple[threading.Thread, list[PipelineRun], ProcessWatch]:
    """A continuous run in a thread, returned once a micro-batch (that takes 5 s) is in flight."""
    out = f'{{id: out, type: destination, plugin: builtin:file, settings: {{path: "{tmp_path}/out"}}}}'
    file = pipeline(tmp_path, records=100_000, destination=out, processor="slow")
    watch = ProcessWatch(hook)
    watch.start()
    runs: list[PipelineRun] = []

    def run() -> None:
        runs.append(
            hook.run_pipeline(
                pipeline_file=file, pipeline_id="p", state_dir=str(tmp_path / "state"), mode="continuous"
            )
        )

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 180
    while not (tmp_path / "in-flight").exists():
        assert time.monotonic() < deadline and runner.is_alive(), "no batch started"
        time.sleep(0.2)
    time.sleep(1)
    return runner, runs, watch


@pytest.mark.engine
def test_a_failing_run_shows_progress_and_the_error_and_keeps_the_traces_in_a_file(
    engine_hook, tmp_path, task_log
):
    destination = (
        "{id: ledger, type: destination, plugin: custom.python, "
        f'settings: {{function: "helpers:ledger", path: "{tmp_path}"}}}}'
    )
    state = PipelineState.of(tmp_path / "state", "p")
    run = engine_hook.run_pipeline(
        pipeline_file=pipeline(tmp_path, records=20, destination=destination),
        pipeline_id="p",
        state_dir=str(state.state_dir),
    )
    assert run.outcome == "transient"
    assert "ValueError: boom: the ledger is down" in run.payload["error"]["message"]
    shown = hook_records(task_log)
    assert any(line.endswith("INFO airflow_conduit.engine: p: starting (until idle)") for line in shown)
    assert any(" INFO airflow_conduit.engine: p: batch 0: 10 records (10 acked" in line for line in shown)
    assert "pipeline p: failed (exit 75)" in shown
    assert any(line.startswith("transient error ") for line in shown)  # the summary's error line
    assert not [line for line in shown if line.lstrip().startswith(TRACE)], shown
    files = list(state.logs_dir.glob("spark-submit-*.log"))
    assert [str(f) for f in files] == [run.spark_output_file]
    output = files[0].read_text()
    assert "\tat org.apache.spark" in output and "Traceback (most recent call last):" in output
    assert "ValueError: boom: the ledger is down" in output
    print(
        f"task log: {len(shown)} records at INFO or above, {len(hook_records(task_log, logging.DEBUG))} in all"
    )


@pytest.mark.engine
def test_no_process_of_the_engine_is_left_when_run_pipeline_returns(engine_hook, tmp_path):
    # spark-submit killed from outside (as by the OOM killer): its Python driver and workers live on.
    runner, runs, watch = start_slow_run(engine_hook, tmp_path)
    os.kill(engine_hook._spark_hook._submit_sp.pid, signal.SIGKILL)
    runner.join(timeout=120)
    seen = watch.stop()
    assert runs and runs[0].returncode == -signal.SIGKILL
    assert len(seen) > 3 and watch.left() == []
    assert runs[0].engine_pid is not None and session_processes(runs[0].engine_pid) == []


@pytest.mark.engine
def test_on_kill_kills_every_process_of_the_engine(engine_hook, tmp_path):
    runner, runs, watch = start_slow_run(engine_hook, tmp_path)
    engine_hook.on_kill()  # the batch in flight cannot finish within stop_timeout (2 s): killed
    seen = watch.stop()
    assert len(seen) > 3 and watch.left() == []
    runner.join(timeout=120)
    assert runs and runs[0].outcome == "transient"
