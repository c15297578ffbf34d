"""ConduitHook: the command it builds, and how it reads a run's end, through real spark-submit.

The application is ``fake_engine.py`` (the engine's arguments, scripted outcomes), so each submission
costs only spark-submit's JVM start (~2 s).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import HERE, SPARK_CONN

from airflow_conduit.engine.jvm import DRIVER_GC_OPTIONS
from airflow_conduit.hooks.conduit import ConduitHook, engine_application, parse_payload_line
from airflow_conduit.state import PipelineState

FAKE = str(HERE / "fake_engine.py")


@pytest.fixture
def hook(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_CONN)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{__import__('os').environ['PATH']}")
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


def test_engine_application_is_job_py():
    assert engine_application().endswith("airflow_conduit/engine/job.py")


def test_submission_carries_the_engine_gc_setting_unless_conf_sets_its_own(hook):
    conf = hook.get_spark_submit_hook([], name="n")._conf
    assert conf["spark.driver.extraJavaOptions"] == DRIVER_GC_OPTIONS
    own = ConduitHook(application=FAKE, conf={"spark.driver.extraJavaOptions": "-Dx=1", "spark.a": "b"})
    conf = own.get_spark_submit_hook([], name="n")._conf
    assert conf == {"spark.driver.extraJavaOptions": "-Dx=1", "spark.a": "b"}


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
        assert "spark-submit exited with" in run.payload["error"]["message"]


def test_spark_submit_that_cannot_start_is_transient(monkeypatch, tmp_path):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "nowhere://x"})
    )
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{__import__('os').environ['PATH']}")
    run = ConduitHook(application=FAKE).run_pipeline(
        pipeline_file=scenario(tmp_path, {"exit_code": 0}), pipeline_id="p", state_dir=str(tmp_path / "s")
    )
    assert run.outcome == "transient" and run.payload["error"]["code"] == "spark_failed"
