"""The Airflow side against the real engine on local Spark, in real ``dag.test()`` runs.

Failures are injected through the engine's own path: a ``custom.python`` processor (``flaky.py``)
raising ``TransientError`` for a while, forever, or ``FatalError``. Each engine run costs a Spark start
(10-30 s here), so record counts are small and delays 1 s.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import HERE, REPO, VENV_BIN

from airflow_conduit.recovery.decision import Restart
from airflow_conduit.state import PipelineState, write_json_atomic

pytestmark = pytest.mark.engine

FLAKY = str(HERE / "pipelines" / "flaky.yaml")


def flaky_dag(
    airflow_env, tmp_path, dag_id: str, function: str, operator_args: str, extra_env: dict | None = None
):
    state_dir = tmp_path / "state"
    env = {
        "CONDUIT_TEST_RECORDS": "20",
        "CONDUIT_TEST_OUTPUT": str(tmp_path / "out"),
        "CONDUIT_TEST_FUNCTION": function,
        "CONDUIT_TEST_HELPERS": str(HERE),
        "CONDUIT_FLAKY_MARKER": str(tmp_path / "first-failure"),
        "CONDUIT_FLAKY_CLEAR_AFTER": "inf",
        **(extra_env or {}),
    }
    source = f"""
        from datetime import timedelta
        import pendulum
        from airflow.sdk import DAG
        from airflow_conduit.operators.pipeline import ConduitPipelineOperator
        from airflow_conduit.operators import ConduitRetryPolicy
        from airflow_conduit.recovery import RecoveryPolicy
        with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            ConduitPipelineOperator(
                task_id="run", pipeline_file={FLAKY!r}, pipeline_id="flaky", state_dir={str(state_dir)!r},
                env_vars={env!r}, {operator_args})
    """
    return airflow_env.write_dag(dag_id, source), PipelineState.of(state_dir, "flaky")


def events(state: PipelineState, name: str) -> list[dict]:
    return [e for e in state.read_audit() if e["event"] == name]


def output_records(directory: Path) -> list[dict]:
    return [
        json.loads(line) for f in sorted(directory.glob("*.jsonl")) for line in f.read_text().splitlines()
    ]


def test_transient_failure_that_clears_is_recovered_and_every_record_arrives_once(airflow_env, tmp_path):
    dag, state = flaky_dag(
        airflow_env,
        tmp_path,
        "e2e_clears",
        "fail_for_a_while",
        "recovery=RecoveryPolicy(min_delay=1, max_retries=5), deferrable=True",
        {"CONDUIT_FLAKY_CLEAR_AFTER": "8"},
    )
    r = airflow_env.run_dag(dag, "e2e_clears")
    assert r["tasks"]["run"]["state"] == "success" and r["tasks"]["run"]["try_number"] == 1
    recovering = events(state, "recovering")
    assert recovering and recovering[0]["attempt"] == 1 and recovering[0]["delay"] == 1.0
    assert recovering[0]["error"]["code"] == "processor_transient"
    assert len(events(state, "started")) == len(recovering) + 1
    assert len(events(state, "restarted")) == len(recovering)
    records = output_records(tmp_path / "out")
    assert len(records) == 20
    assert len({r["position"] for r in records}) == 20  # each once
    assert r["xcom"]["run"]["records"]["acked"] == 20
    assert state.read_status()["status"] == "stopped"


def test_never_clearing_failure_degrades_after_one_plus_max_retries(airflow_env, tmp_path):
    dag, state = flaky_dag(
        airflow_env,
        tmp_path,
        "e2e_never_clears",
        "fail_for_a_while",
        "recovery=RecoveryPolicy(min_delay=1, max_retries=2), retries=3",
    )
    r = airflow_env.run_dag(dag, "e2e_never_clears")
    assert r["tasks"]["run"]["state"] == "failed" and r["tasks"]["run"]["try_number"] == 1
    assert len(events(state, "started")) == 3  # 1 + max_retries engine runs
    assert [(e["attempt"], e["delay"]) for e in events(state, "recovering")] == [(1, 1.0), (2, 2.0)]
    (degraded,) = events(state, "degraded")
    assert degraded["attempt"] == 3 and "max_retries=2" in degraded["reason"]
    status = state.read_status()
    assert status["status"] == "degraded" and status["error"]["code"] == "cannot_recover"
    assert not list((tmp_path / "out").glob("*.jsonl")) if (tmp_path / "out").exists() else True


def test_fatal_error_fails_at_once_without_restart(airflow_env, tmp_path):
    dag, state = flaky_dag(
        airflow_env,
        tmp_path,
        "e2e_fatal",
        "always_fatal",
        "recovery=RecoveryPolicy(min_delay=1, max_retries=5), retries=2, retry_delay=timedelta(seconds=1)",
    )
    r = airflow_env.run_dag(dag, "e2e_fatal")
    assert r["tasks"]["run"]["state"] == "failed" and r["tasks"]["run"]["try_number"] == 1
    assert len(events(state, "started")) == 1
    assert events(state, "recovering") == []
    status = state.read_status()
    assert status["status"] == "degraded" and status["error"]["kind"] == "fatal"
    assert "PipelineDegradedError" in r["log"]


def test_old_failure_outside_the_window_no_longer_counts(airflow_env, tmp_path):
    dag, state = flaky_dag(
        airflow_env,
        tmp_path,
        "e2e_window",
        "fail_for_a_while",
        "recovery=RecoveryPolicy(min_delay=1, max_retries=1, max_retries_window=60)",
    )
    long_ago = datetime.now(UTC) - timedelta(minutes=10)
    old = Restart(decided_at=long_ago, attempt=1, delay=timedelta(seconds=1), restarted_at=long_ago)
    write_json_atomic(state.root / "recovery.json", {"restarts": [old.to_dict()]})
    r = airflow_env.run_dag(dag, "e2e_window")
    assert r["tasks"]["run"]["state"] == "failed"
    # The old restart did not count: one restart (attempt 1), then degraded at attempt 2.
    assert [(e["attempt"], e["delay"]) for e in events(state, "recovering")] == [(1, 1.0)]
    assert events(state, "degraded")[0]["attempt"] == 2
    assert len(events(state, "started")) == 2


def test_retry_policy_path_through_airflow_retries(airflow_env, tmp_path):
    dag, state = flaky_dag(
        airflow_env,
        tmp_path,
        "e2e_retry_policy",
        "fail_for_a_while",
        "retry_policy=ConduitRetryPolicy(RecoveryPolicy(min_delay=1, max_retries=1))",
    )
    r = airflow_env.run_dag(dag, "e2e_retry_policy")
    task = r["tasks"]["run"]
    assert (
        task["state"] == "failed" and task["try_number"] == 2
    )  # one Airflow retry, then the window is used up
    assert [(e["attempt"], e["delay"]) for e in events(state, "recovering")] == [(1, 1.0)]
    assert [e["attempt"] for e in events(state, "restarted")] == [1]
    assert events(state, "degraded")[0]["attempt"] == 2
    assert "Retry policy decision" in r["log"]


# example DAGs ------------------------------------------------------------------------------------
@pytest.fixture
def example_env(tmp_path):
    return {
        "CONDUIT_STATE_DIR": str(tmp_path / "state"),
        "CONDUIT_OUTPUT_DIR": str(tmp_path / "out"),
        "CONDUIT_REPLAY_DIR": str(tmp_path / "replay-inbox"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    }


def test_example_hourly_dag_then_dlq_review_acknowledges(airflow_env, example_env, tmp_path, monkeypatch):
    dags = REPO / "dags"
    r = airflow_env.run_dag(
        dags / "conduit_orders_hourly.py", "conduit_orders_hourly", env=example_env, remove=False
    )
    assert r["tasks"]["orders"]["state"] == "success", r["log"][-3000:]
    records = r["xcom"]["orders"]["records"]
    assert records["read"] == 1000 and records["acked"] + records["dlq"] == 1000 and records["dlq"] > 0
    (event,) = r["asset_events"]
    assert event["uri"] == "conduit://orders/dlq" and event["group"] == "dead_letter_queue"
    extra = event["extra"]
    assert extra["records"] == records["dlq"]
    assert extra["path"] == str(tmp_path / "state" / "orders" / "dlq")
    assert extra["error_codes"] == ["amount is a multiple of 10"]
    assert extra["nodes"] == ["orders:reject-round-amounts"]
    assert extra["first_position"] and extra["last_position"]
    written = output_records(tmp_path / "out" / "orders")
    assert len(written) == records["acked"]
    assert all(w["payload"]["after"]["amount"] % 10 for w in written)

    # The review DAG waits for a person (dag.test() never answers: the real scheduler and API answer in
    # tests/deploy/test_7_dlq_review.py); its review task, answered "acknowledge" as the API would.
    for name, value in example_env.items():
        monkeypatch.setenv(name, value)
    review = example_dag_task(dags / "conduit_orders_dlq_review.py", "conduit_orders_dlq_review")
    context = {"triggering_asset_events": {review.asset: [SimpleNamespace(extra=extra)]}}
    shown = review.prepare(context)
    assert len(shown) == records["dlq"] and f"**{records['dlq']}** record(s)" in (review.body or "")
    answer = {
        "chosen_options": ["acknowledge"],
        "params_input": {"reason": "round amounts are test orders"},
        "responded_at": datetime.now(UTC),
        "responded_by_user": {"id": "1", "name": "alice"},
    }
    outcome = review.execute_complete(context, answer)
    assert (outcome["action"], outcome["skipped"], outcome["user"]) == (
        "acknowledge",
        records["dlq"],
        "alice",
    )
    state = PipelineState.of(tmp_path / "state", "orders")
    assert len(state.read_acked()) == records["dlq"]
    assert events(state, "dlq_reviewed")[0]["reason"] == "round amounts are test orders"


def example_dag_task(dag_file: Path, dag_id: str, task_id: str = "review") -> Any:
    """A task of an example DAG file, loaded in this process (its environment set by the caller)."""
    import runpy

    namespace = runpy.run_path(str(dag_file))
    dag = next(v for v in namespace.values() if getattr(v, "dag_id", None) == dag_id)
    return dag.get_task(task_id)


def test_example_continuous_dag_with_sensor(airflow_env, example_env, tmp_path):
    env = {
        **example_env,
        # The clock starts when the engine reports running; on a loaded 2-core machine the first
        # micro-batch took longer than 12 s and the stop came before any record (read 0).
        "CONDUIT_CLICKS_RUN_SECONDS": "30",
        # dag.test() runs one task at a time: the sensor pokes in reschedule mode instead of deferring.
        "CONDUIT_TEST_TASK_PATCH": json.dumps({"watch": {"deferrable": False, "mode": "reschedule"}}),
    }
    r = airflow_env.run_dag(
        REPO / "dags" / "conduit_clicks_continuous.py", "conduit_clicks_continuous", env=env, remove=False
    )
    assert {t: v["state"] for t, v in r["tasks"].items()} == {
        "clicks": "success",
        "watch": "success",
        "report": "success",
    }, r["log"][-4000:]
    records = r["xcom"]["report"]["return_value"]
    assert records["read"] > 0 and records["acked"] == records["read"]
    assert len(output_records(tmp_path / "out" / "clicks")) == records["acked"]


def test_deferrable_sensor_watches_a_pipeline_started_by_the_cli(airflow_env, tmp_path):
    state_dir = tmp_path / "state"
    env = {**airflow_env.env, "CONDUIT_OUTPUT_DIR": str(tmp_path / "out")}
    engine = subprocess.Popen(
        [
            str(VENV_BIN / "airflow-conduit"),
            "run",
            str(REPO / "dags" / "pipelines" / "clicks.yaml"),
            "--pipeline",
            "clicks",
            "--state-dir",
            str(state_dir),
            "--master",
            "local[2]",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    state = PipelineState.of(state_dir, "clicks")

    def stop_when_running():
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if (state.read_status() or {}).get("status") == "running" and (state.read_status() or {}).get(
                "batches", 0
            ):
                break
            time.sleep(1)
        time.sleep(3)
        subprocess.run(
            [str(VENV_BIN / "airflow-conduit"), "stop", "clicks", "--state-dir", str(state_dir)], env=env
        )

    stopper = threading.Thread(target=stop_when_running, daemon=True)
    stopper.start()
    started = datetime.now(UTC) - timedelta(seconds=5)
    dag = airflow_env.write_dag(
        "e2e_sensor",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from airflow_conduit.sensors.pipeline import ConduitPipelineSensor
        with DAG("e2e_sensor", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            ConduitPipelineSensor(task_id="watch", pipeline_id="clicks", state_dir={str(state_dir)!r},
                                  newer_than={started.isoformat()!r}, poke_interval=1, deferrable=True,
                                  deferral_threshold=2)
        """,
    )
    try:
        r = airflow_env.run_dag(dag, "e2e_sensor")
    finally:
        try:
            engine.wait(timeout=120)
        except subprocess.TimeoutExpired:
            engine.kill()
    assert engine.returncode == 0, engine.stdout.read()[-3000:] if engine.stdout else ""
    assert r["tasks"]["watch"]["state"] == "success"
    assert "[DAG TEST] running trigger in line" in r["log"]
    payload = r["xcom"]["watch"]["return_value"]
    assert payload["status"] == "stopped" and payload["records"]["read"] > 0
