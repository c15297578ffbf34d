"""Recovery through the real scheduler and executor (cases 2-4 of the deployment suite; case 1 is in
test_5_outage.py).

Each DAG run is triggered through the REST API and followed there (DAG run and task instance states,
tries, task logs, XComs); the pipeline's own account (audit log, status, exit payload) comes from the
shared state dir, and the records from the file destination.
"""

from __future__ import annotations

import base64

import pytest
from deployment import Deployment, read_jsonl

from airflow_conduit.state import PipelineState

pytestmark = pytest.mark.deploy


def events(state: PipelineState, name: str) -> list[dict]:
    return [e for e in state.read_audit() if e["event"] == name]


def positions(records: list[dict]) -> list[int]:
    """The generator's positions (record numbers; raw bytes, base64 in OpenCDC JSON), sorted."""
    return sorted(int(base64.b64decode(r["position"])) for r in records)


def test_fatal_error_fails_without_retry(deploy: Deployment) -> None:
    """Case 2: a FatalError fails the task at its first try although it has retries=2."""
    api = deploy.api
    run_id = api.trigger("deploy_fatal")
    watch = api.wait_for_run("deploy_fatal", run_id, timeout=600)
    ti = watch.tis["run"]
    assert watch.run["state"] == "failed", watch.seen
    assert ti["state"] == "failed" and ti["try_number"] == 1, ti
    assert ti["max_tries"] == 2  # retries=2, unused
    assert "up_for_retry" not in watch.seen["run"]
    state = PipelineState.of(deploy.state_dir, "deploy-fatal")
    assert len(events(state, "started")) == 1 and events(state, "recovering") == []
    status = state.read_status()
    assert status["status"] == "degraded", status
    assert status["error"]["kind"] == "fatal" and status["error"]["code"] == "processor_fatal", status
    assert "rejected the credentials" in status["error"]["message"]
    log = api.log("deploy_fatal", run_id, "run", 1)
    assert "PipelineDegradedError" in log, log[-3000:]
    print(
        f"\nverified: a FatalError on the Spark worker failed the task at try 1 of {ti['max_tries'] + 1} "
        f"without retry (states {watch.seen['run']}), 1 engine run, pipeline degraded "
        f"({status['error']['code']})"
    )


def test_window_used_up_degrades_after_one_plus_max_retries(deploy: Deployment) -> None:
    """Case 3: an outage that never ends, RecoveryPolicy(min_delay=1, max_retries=2): 3 engine runs,
    then degraded (cannot_recover) and the task fails without Airflow retry."""
    api = deploy.api
    run_id = api.trigger("deploy_degraded")
    watch = api.wait_for_run("deploy_degraded", run_id, timeout=900)
    ti = watch.tis["run"]
    assert watch.run["state"] == "failed", watch.seen
    assert ti["state"] == "failed" and ti["try_number"] == 1, ti
    state = PipelineState.of(deploy.state_dir, "deploy-degraded")
    started = events(state, "started")
    assert len(started) == 3, [e["event"] for e in state.read_audit()]
    assert [(e["attempt"], e["delay"]) for e in events(state, "recovering")] == [(1, 1.0), (2, 2.0)]
    (degraded,) = [e for e in events(state, "degraded") if "attempt" in e]
    assert degraded["attempt"] == 3 and "max_retries=2" in degraded["reason"], degraded
    status = state.read_status()
    assert status["status"] == "degraded" and status["error"]["code"] == "cannot_recover", status
    exit_payload = state.read_exit_payload()
    assert exit_payload["status"] == "failed" and exit_payload["error"]["code"] == "processor_transient"
    log = api.log("deploy_degraded", run_id, "run", 1)
    assert "PipelineDegradedError" in log, log[-3000:]
    print(
        f"\nverified: a never-ending outage ran the engine exactly 3 times (1 + max_retries=2; audit "
        f"log: {len(started)} started, restarts after 1 s and 2 s), then the pipeline was degraded "
        f"(cannot_recover) and the task failed at try 1 of {ti['max_tries'] + 1} (states {watch.seen['run']})"
    )


def test_retry_policy_path_retries_through_airflow(deploy: Deployment) -> None:
    """Case 4: retry_policy=ConduitRetryPolicy(...): the first try's run fails transiently, Airflow
    retries the task after the policy's delay, and the second try's run delivers every record."""
    api, dag_id, records = deploy.api, "deploy_retry_policy", 500
    run_id = api.trigger(dag_id)
    watch = api.wait_for_run(dag_id, run_id, timeout=900)
    ti = watch.tis["run"]
    assert watch.run["state"] == "success", watch.seen
    assert ti["state"] == "success" and ti["try_number"] == 2, ti
    assert "up_for_retry" in watch.seen["run"], watch.seen
    tries = {t["try_number"]: t["state"] for t in api.tries(dag_id, run_id, "run")}
    assert tries == {1: "failed", 2: "success"} or tries == {1: "up_for_retry", 2: "success"}, tries
    first = api.log(dag_id, run_id, "run", 1)
    assert "PipelineTransientError" in first, first[-3000:]
    state = PipelineState.of(deploy.state_dir, "deploy-retry")
    assert len(events(state, "started")) == 2
    assert [(e["attempt"], e["delay"]) for e in events(state, "recovering")] == [(1, 2.0)]
    written = read_jsonl(deploy.output_dir / "deploy-retry")
    assert positions(written) == list(range(records))
    result = api.xcom(dag_id, run_id, "run")
    assert result["status"] == "stopped" and result["records"]["acked"] == records, result
    print(
        f"\nverified: ConduitRetryPolicy turned the first try's transient failure into an Airflow retry "
        f"after 2 s (tries {tries}, states {watch.seen['run']}); the second try delivered all {records} "
        "records once"
    )
