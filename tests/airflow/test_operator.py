"""ConduitPipelineOperator and ConduitPipelineSensor in real ``dag.test()`` runs on SQLite.

The engine is ``fake_engine.py`` under real ``spark-submit`` (scripted outcomes, ~2 s a run), so every
recovery path is covered quickly; ``test_engine_e2e.py`` runs the real engine.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from conftest import HERE

from airflow_conduit.recovery.decision import Restart
from airflow_conduit.state import PipelineState, write_json_atomic

FAKE = str(HERE / "fake_engine.py")
TRANSIENT = {
    "exit_code": 75,
    "error": {"kind": "transient", "code": "source_failed", "message": "down", "node": "p:src"},
}
FATAL = {
    "exit_code": 1,
    "error": {"kind": "fatal", "code": "processor_fatal", "message": "bad", "node": "p:proc"},
}


def ok(acked: int = 5, dlq: int = 0) -> dict:
    return {"exit_code": 0, "records": {"read": acked + dlq, "acked": acked}, "dlq": dlq}


def pipeline_dag(airflow_env, tmp_path, dag_id: str, runs: list[dict], operator_args: str, extra: str = ""):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"runs": runs}))
    state_dir = tmp_path / "state"
    source = f"""
        from datetime import timedelta
        import pendulum
        from airflow.sdk import DAG
        from airflow_conduit.operators.pipeline import ConduitPipelineOperator
        from airflow_conduit.operators import ConduitRetryPolicy
        from airflow_conduit.recovery import RecoveryPolicy
        {extra}
        with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            ConduitPipelineOperator(
                task_id="run", pipeline_file={str(scenario)!r}, pipeline_id="p",
                state_dir={str(state_dir)!r}, application={FAKE!r}, {operator_args})
    """
    return airflow_env.write_dag(dag_id, source), PipelineState.of(state_dir, "p")


def audit(state: PipelineState) -> list[tuple]:
    out = []
    for e in state.read_audit():
        if e["event"] == "recovering":
            out.append(("recovering", e["attempt"], e["delay"]))
        elif e["event"] in ("restarted", "degraded"):
            out.append((e["event"], e.get("attempt")))
        else:
            out.append((e["event"],))
    return out


def fake_runs(state: PipelineState) -> int:
    return int((state.root / "fake_runs").read_text())


def test_transient_failures_are_recovered_in_the_same_task_deferred(airflow_env, tmp_path):
    """Backoffs of 1 s and 2 s with a deferral threshold of 2 s: the first in the worker, the second
    deferred."""
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_recovers",
        [TRANSIENT, TRANSIENT, ok(acked=5, dlq=2)],
        "recovery=RecoveryPolicy(min_delay=1, max_retries=3), deferrable=True, deferral_threshold=2",
    )
    r = airflow_env.run_dag(dag, "op_recovers")
    assert r["state"] == "success"
    assert r["tasks"]["run"]["state"] == "success" and r["tasks"]["run"]["try_number"] == 1
    assert fake_runs(state) == 3
    assert audit(state) == [
        ("started",),
        ("fault",),
        ("recovering", 1, 1.0),
        ("restarted", 1),
        ("started",),
        ("fault",),
        ("recovering", 2, 2.0),
        ("restarted", 2),
        ("started",),
        ("stopped",),
    ]
    assert r["log"].count("[DAG TEST] running trigger in line") == 1
    assert "Restart attempt 1 in 1s: waiting in the worker (deferring pays from 2s)" in r["log"]
    assert "Restart attempt 2 in 2s: deferring to the triggerer" in r["log"]
    xcom = r["xcom"]["run"]
    assert xcom["restarts"] == 2 and xcom["records"]["acked"] == 5
    assert len(xcom["return_value"]["runs"]) == 3
    assert [e["extra"]["records"] for e in r["asset_events"]] == [2]
    assert json.loads((state.root / "recovery.json").read_text())["restarts"] == []


def test_backoffs_shorter_than_the_default_threshold_are_waited_out_in_the_worker(airflow_env, tmp_path):
    """Deferring a 1 s backoff lets the trigger fire before the deferring worker has exited; a real
    scheduler then fails the resumed task. Deferrable or not, such waits stay in the worker."""
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_short_backoff",
        [TRANSIENT, ok()],
        "recovery=RecoveryPolicy(min_delay=1, max_retries=3), deferrable=True",
    )
    r = airflow_env.run_dag(dag, "op_short_backoff")
    assert r["tasks"]["run"]["state"] == "success"
    assert fake_runs(state) == 2
    assert "running trigger in line" not in r["log"]
    assert "Restart attempt 1 in 1s: waiting in the worker (deferring pays from 30s)" in r["log"]


def test_never_clearing_failure_degrades_after_one_plus_max_retries(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_degrades",
        [TRANSIENT],
        "recovery=RecoveryPolicy(min_delay=1, max_delay=3, max_retries=3), retries=2, "
        "retry_delay=timedelta(seconds=1)",
    )
    r = airflow_env.run_dag(dag, "op_degrades")
    assert r["state"] == "failed"
    task = r["tasks"]["run"]
    assert task["state"] == "failed" and task["try_number"] == 1  # AirflowFailException: no Airflow retry
    assert fake_runs(state) == 4
    recovering = [a for a in audit(state) if a[0] == "recovering"]
    assert recovering == [("recovering", 1, 1.0), ("recovering", 2, 2.0), ("recovering", 3, 3.0)]
    assert audit(state)[-1] == ("degraded", 4)
    status = state.read_status()
    assert status["status"] == "degraded" and status["error"]["code"] == "cannot_recover"
    assert "PipelineDegradedError" in r["log"]
    assert r["asset_events"] == []


def test_fatal_error_fails_at_once(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_fatal",
        [FATAL, ok()],
        "recovery=RecoveryPolicy(min_delay=1, max_retries=5), retries=3, retry_delay=timedelta(seconds=1)",
    )
    r = airflow_env.run_dag(dag, "op_fatal")
    assert r["tasks"]["run"]["state"] == "failed" and r["tasks"]["run"]["try_number"] == 1
    assert fake_runs(state) == 1
    assert audit(state) == [("started",), ("fault",), ("degraded", None)]
    assert state.read_status()["error"]["code"] == "processor_fatal"


def test_the_engine_is_told_which_task_instance_started_it(airflow_env, tmp_path):
    """The job gets the task instance's AIRFLOW_CTX_* variables from the operator, with the map index
    that Airflow itself does not export; the engine puts them into its started event."""
    dag, state = pipeline_dag(airflow_env, tmp_path, "op_origin", [ok()], "retries=0")
    r = airflow_env.run_dag(dag, "op_origin")
    assert r["tasks"]["run"]["state"] == "success"
    started = [e for e in state.read_audit() if e["event"] == "started"]
    assert [e["airflow"] for e in started] == [
        {"dag_id": "op_origin", "run_id": r["run_id"], "task_id": "run", "try_number": 1, "map_index": -1}
    ]


def test_config_error_fails_without_retry(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_config",
        [{"exit_code": 2, "write_exit_json": False, "print_payload": False}],
        "retries=2, retry_delay=timedelta(seconds=1)",
    )
    r = airflow_env.run_dag(dag, "op_config")
    assert r["tasks"]["run"]["state"] == "failed" and r["tasks"]["run"]["try_number"] == 1
    assert "PipelineConfigError" in r["log"]


def test_old_failures_outside_the_window_do_not_count_in_worker_sleep_path(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_window",
        [TRANSIENT, ok()],
        "recovery=RecoveryPolicy(min_delay=1, max_retries=1, max_retries_window=60), deferrable=False",
    )
    # One restart from ten minutes ago, already restarted: outside the 60 s window.
    old = Restart(
        decided_at=datetime.now(UTC) - timedelta(minutes=10),
        attempt=1,
        delay=timedelta(seconds=1),
        restarted_at=datetime.now(UTC) - timedelta(minutes=10),
    )
    write_json_atomic(state.root / "recovery.json", {"restarts": [old.to_dict()]})
    r = airflow_env.run_dag(dag, "op_window")
    assert r["tasks"]["run"]["state"] == "success"
    assert fake_runs(state) == 2
    assert ("recovering", 1, 1.0) in audit(state)
    assert "running trigger in line" not in r["log"]  # slept in the worker


def test_a_recent_failure_inside_the_window_counts(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_window_recent",
        [TRANSIENT, ok()],
        "recovery=RecoveryPolicy(min_delay=1, max_retries=1, max_retries_window=600)",
    )
    recent = Restart(
        decided_at=datetime.now(UTC) - timedelta(seconds=30),
        attempt=1,
        delay=timedelta(seconds=1),
        restarted_at=datetime.now(UTC) - timedelta(seconds=29),
    )
    write_json_atomic(state.root / "recovery.json", {"restarts": [recent.to_dict()]})
    r = airflow_env.run_dag(dag, "op_window_recent")
    assert r["tasks"]["run"]["state"] == "failed"
    assert fake_runs(state) == 1
    assert audit(state)[-1] == ("degraded", 2)


def test_max_retries_zero_turns_recovery_off(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_off",
        [TRANSIENT, ok()],
        "recovery=RecoveryPolicy(max_retries=0), retries=2",
    )
    r = airflow_env.run_dag(dag, "op_off")
    assert r["tasks"]["run"]["state"] == "failed" and r["tasks"]["run"]["try_number"] == 1
    assert fake_runs(state) == 1


def test_retry_policy_path_uses_airflow_retries(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_retry_policy",
        [TRANSIENT, TRANSIENT, ok()],
        "retry_policy=ConduitRetryPolicy(RecoveryPolicy(min_delay=1, max_retries=3)), "
        "retry_delay=timedelta(hours=1)",
    )
    r = airflow_env.run_dag(dag, "op_retry_policy")
    task = r["tasks"]["run"]
    assert task["state"] == "success" and task["try_number"] == 3
    assert task["max_tries"] == 1000  # the operator gave the policy room
    assert [h["try_number"] for h in task.get("history", [])] == [1, 2]
    assert [a for a in audit(state) if a[0] in ("recovering", "restarted")] == [
        ("recovering", 1, 1.0),
        ("restarted", 1),
        ("recovering", 2, 2.0),
        ("restarted", 2),
    ]
    assert "running trigger in line" not in r["log"]
    assert "Retry policy decision" in r["log"]


def test_a_retry_reattaches_to_the_engine_its_earlier_try_left_running(airflow_env, tmp_path):
    """Try 1's engine outlives it (its worker died); try 2 watches that engine instead of submitting a
    second one beside it, and takes its exit payload."""
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_reattach",
        [{**TRANSIENT, "detach_seconds": 6}, ok(acked=99)],
        "recovery=None, retries=1, retry_delay=timedelta(seconds=1)",
    )
    r = airflow_env.run_dag(dag, "op_reattach")
    task = r["tasks"]["run"]
    assert task["state"] == "success" and task["try_number"] == 2
    assert fake_runs(state) == 1  # try 2 submitted nothing
    reattached = [e for e in state.read_audit() if e["event"] == "reattached"]
    assert len(reattached) == 1 and reattached[0]["try_number"] == 2
    assert reattached[0]["holder"]["owner"].startswith("op_reattach/run/")
    assert reattached[0]["holder"]["try_number"] == 1
    assert "Reattaching to pipeline p's engine left running by an earlier try" in r["log"]
    assert r["xcom"]["run"]["records"]["acked"] == 7  # the detached engine's payload, not ok(acked=99)


@pytest.mark.parametrize("path", ["recovery", "retry_policy", "deferred"])
def test_a_run_refused_by_the_lock_waits_and_leaves_the_running_pipelines_state_alone(
    airflow_env, tmp_path, path
):
    """Another engine runs the pipeline: its status, restart history and window are not this task's,
    and two refusals must not use up a window of one restart."""
    args = {
        "recovery": "recovery=RecoveryPolicy(min_delay=1, max_retries=1)",
        "retry_policy": "retry_policy=ConduitRetryPolicy(RecoveryPolicy(min_delay=1, max_retries=1))",
        "deferred": "recovery=RecoveryPolicy(min_delay=1, max_retries=1), deferral_threshold=2",
    }[path]
    dag, state = pipeline_dag(
        airflow_env, tmp_path, f"op_refused_{path}", [{"refused": True}, {"refused": True}, ok()], args
    )
    r = airflow_env.run_dag(dag, f"op_refused_{path}")
    task = r["tasks"]["run"]
    assert task["state"] == "success" and task["try_number"] == 1
    assert fake_runs(state) == 3
    assert [e for e in audit(state) if e[0] != "started"] == [("stopped",)]  # no fault, no recovering
    assert not (state.root / "recovery.json").exists()
    assert "which refused this run (2 time(s)); trying again in 2s" in r["log"]
    assert r["xcom"]["run"]["restarts"] == 0
    # The second wait (2 s) reaches the threshold of the "deferred" case only.
    assert r["log"].count("running trigger in line") == (1 if path == "deferred" else 0)


def test_retry_policy_path_degrades_when_the_window_is_used_up(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_retry_policy_fail",
        [TRANSIENT],
        "retry_policy=ConduitRetryPolicy(), recovery=RecoveryPolicy(min_delay=1, max_retries=2), retries=10",
    )
    r = airflow_env.run_dag(dag, "op_retry_policy_fail")
    task = r["tasks"]["run"]
    assert task["state"] == "failed" and task["try_number"] == 3
    assert fake_runs(state) == 3
    assert [a for a in audit(state) if a[0] == "recovering"] == [
        ("recovering", 1, 1.0),
        ("recovering", 2, 2.0),
    ]
    assert audit(state)[-1] == ("degraded", 3)


def test_recovery_none_leaves_transient_failures_to_airflow_retries(airflow_env, tmp_path):
    dag, state = pipeline_dag(
        airflow_env,
        tmp_path,
        "op_plain_retries",
        [TRANSIENT, ok()],
        "recovery=None, retries=1, retry_delay=timedelta(seconds=1)",
    )
    r = airflow_env.run_dag(dag, "op_plain_retries")
    assert r["tasks"]["run"]["state"] == "success" and r["tasks"]["run"]["try_number"] == 2
    assert not [a for a in audit(state) if a[0] == "recovering"]


def test_no_dlq_records_no_asset_event_and_failed_runs_records_are_announced_later(airflow_env, tmp_path):
    dag, state = pipeline_dag(airflow_env, tmp_path, "op_dlq_none", [ok(acked=3)], "")
    r = airflow_env.run_dag(dag, "op_dlq_none", remove=False)
    assert r["tasks"]["run"]["state"] == "success"
    assert r["asset_events"] == [] and r["xcom"]["run"]["dlq"]["records"] == 0
    # A fatal run leaves 3 records in the DLQ; the next successful task run announces them with its own 1.
    scenario = json.loads((tmp_path / "scenario.json").read_text())
    scenario["runs"] = [ok(), {**FATAL, "dlq": 3}, ok(acked=2, dlq=1)]
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    r = airflow_env.run_dag(dag, "op_dlq_none", remove=False)
    assert r["tasks"]["run"]["state"] == "failed" and r["asset_events"] == []
    r = airflow_env.run_dag(dag, "op_dlq_none")
    assert r["tasks"]["run"]["state"] == "success"
    (event,) = r["asset_events"]
    assert event["uri"] == "conduit://p/dlq" and event["group"] == "dead_letter_queue"
    extra = event["extra"]
    assert extra["records"] == 4
    assert extra["files"] == {"000001.jsonl": [0, 3], "000002.jsonl": [0, 1]}
    assert extra["path"] == str(state.dlq_dir)
    assert extra["first_position"] and extra["last_position"] and extra["error_codes"]


# sensor ------------------------------------------------------------------------------------------
def sensor_dag(airflow_env, tmp_path, dag_id: str, args: str):
    source = f"""
        import pendulum
        from airflow.sdk import DAG
        from airflow_conduit.sensors.pipeline import ConduitPipelineSensor
        with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            ConduitPipelineSensor(task_id="watch", pipeline_id="p", state_dir={str(tmp_path / "state")!r},
                                  poke_interval=1, {args})
    """
    return airflow_env.write_dag(dag_id, source), PipelineState.of(tmp_path / "state", "p")


@pytest.mark.parametrize("deferrable", [True, False])
def test_sensor_succeeds_on_graceful_stop(airflow_env, tmp_path, deferrable):
    dag_id = f"sensor_stopped_{deferrable}".lower()
    dag, state = sensor_dag(airflow_env, tmp_path, dag_id, f"deferrable={deferrable}")
    state.write_exit_payload({"pipeline": "p", "status": "stopped", "exit_code": 0, "records": {"acked": 9}})
    state.write_status("stopped")
    r = airflow_env.run_dag(dag, dag_id)
    assert r["tasks"]["watch"]["state"] == "success"
    assert r["xcom"]["watch"]["return_value"]["records"] == {"acked": 9}


def stop_later(state: PipelineState, seconds: float) -> threading.Thread:
    """The watched pipeline stops ``seconds`` after the DAG run began."""

    def stop() -> None:
        time.sleep(seconds)
        state.write_exit_payload(
            {"pipeline": "p", "status": "stopped", "exit_code": 0, "records": {"acked": 4}}
        )
        state.write_status("stopped")

    thread = threading.Thread(target=stop, daemon=True)
    thread.start()
    return thread


def test_deferrable_sensor_polls_in_the_worker_before_it_defers(airflow_env, tmp_path):
    """A pipeline that stops within the threshold is seen from the worker: no deferral, no hand-over."""
    dag, state = sensor_dag(airflow_env, tmp_path, "sensor_short", "deferrable=True")
    state.write_status("running")
    stopper = stop_later(state, 15)  # dag.test() takes 5-8 s to start the sensor here
    r = airflow_env.run_dag(dag, "sensor_short")
    stopper.join()
    assert r["tasks"]["watch"]["state"] == "success"
    assert r["xcom"]["watch"]["return_value"]["records"] == {"acked": 4}
    assert "running trigger in line" not in r["log"]


def test_deferrable_sensor_defers_past_its_threshold(airflow_env, tmp_path):
    dag, state = sensor_dag(airflow_env, tmp_path, "sensor_long", "deferrable=True, deferral_threshold=1")
    state.write_status("running")
    # dag.test() starts the sensor 5-8 s after the run begins here, and over 10 s on a loaded machine: the
    # pipeline stops well after that, so the sensor is past its 1 s threshold and has deferred.
    stopper = stop_later(state, 30)
    r = airflow_env.run_dag(dag, "sensor_long")
    stopper.join()
    assert r["tasks"]["watch"]["state"] == "success"
    assert "Pipeline p is running after 1s; deferring" in r["log"]
    assert "running trigger in line" in r["log"]


def test_sensor_fails_without_retry_when_degraded(airflow_env, tmp_path):
    dag, state = sensor_dag(airflow_env, tmp_path, "sensor_degraded", "retries=3")
    state.write_status("degraded", error={"kind": "fatal", "code": "dlq_threshold_exceeded", "message": "x"})
    r = airflow_env.run_dag(dag, "sensor_degraded")
    assert r["tasks"]["watch"]["state"] == "failed" and r["tasks"]["watch"]["try_number"] == 1


def test_sensor_fails_retryably_on_unrecovered_transient_failure(airflow_env, tmp_path):
    dag, state = sensor_dag(
        airflow_env, tmp_path, "sensor_transient", "failed_grace=0, retries=1, retry_delay=1, deferrable=True"
    )
    state.write_status("failed", error={"kind": "transient", "code": "source_failed", "message": "x"})
    r = airflow_env.run_dag(dag, "sensor_transient")
    assert r["tasks"]["watch"]["state"] == "failed" and r["tasks"]["watch"]["try_number"] == 2
    assert "PipelineTransientError" in r["log"]
