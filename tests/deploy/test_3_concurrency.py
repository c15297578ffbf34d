"""One engine per pipeline under a real scheduler (cases 7 and 8).

The engine holds ``STATE_DIR/PIPELINE_ID/run.lock`` while it runs; a second engine on the pipeline is
refused at once (exit 75, ``pipeline_locked``, audit event ``refused`` naming the holder). The operator
names its engine (``CONDUIT_RUN_OWNER``: DAG, task, run, map index), so a retry of the same task instance
that finds its earlier try's engine still running reattaches to it instead of submitting another.
"""

from __future__ import annotations

import base64
import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from deployment import KILLED_DAG, TERMINAL_RUN_STATES, Deployment, KilledRun, RunWatch, read_jsonl

from airflow_conduit.state import PipelineState

pytestmark = pytest.mark.deploy


def positions(records: list[dict]) -> list[int]:
    return sorted(int(base64.b64decode(r["position"])) for r in records)


def engine_spans(audit: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(started, ended) of each engine run in the audit log; ``ended`` None while one runs. An engine
    writes ``started`` once it holds the run lock and ``stopped`` or ``fault`` before it lets go of it;
    a refused engine writes only ``refused``."""
    spans: list[list[str | None]] = []
    for event in audit:
        if event["event"] == "started":
            spans.append([event["time"], None])
        elif event["event"] in ("stopped", "fault") and spans and spans[-1][1] is None:
            spans[-1][1] = event["time"]
    return [(start, end) for start, end in spans]


def wait_for_runs(deploy: Deployment, dag_id: str, run_ids: list[str], timeout: float, on_poll=None):
    """Poll several runs of one DAG until all ended; their watches, by run id."""
    api = deploy.api
    watches = {run_id: RunWatch(dag_id, run_id) for run_id in run_ids}
    deadline = time.monotonic() + timeout
    while True:
        done = True
        for run_id, watch in watches.items():
            if watch.run.get("state") in TERMINAL_RUN_STATES:
                continue
            tis = api.task_instances(dag_id, run_id)
            watch.observe(tis)
            run = api.run(dag_id, run_id)
            if run["state"] in TERMINAL_RUN_STATES:
                watch.run, watch.tis = run, api.task_instances(dag_id, run_id)
            else:
                done = False
        if on_poll is not None:
            on_poll()
        if done:
            return watches
        assert time.monotonic() < deadline, {r: w.seen for r, w in watches.items()}
        time.sleep(0.5)


def test_two_dag_runs_on_one_pipeline(deploy: Deployment) -> None:
    """Case 7: two DAG runs of one DAG start the same pipeline at once. One engine runs, the other is
    refused (pipeline_locked) and recovers once the first has ended; no record is written twice."""
    api, dag_id, records = deploy.api, "deploy_concurrent", 4000
    state = PipelineState.of(deploy.state_dir, "deploy-shared")
    statuses: list[str] = []

    def note_status() -> None:
        status = (state.read_status() or {}).get("status")
        if status and (not statuses or statuses[-1] != status):
            statuses.append(status)

    run_ids = [api.trigger(dag_id), api.trigger(dag_id)]
    watches = wait_for_runs(deploy, dag_id, run_ids, timeout=900, on_poll=note_status)

    audit = state.read_audit()
    refused = [e for e in audit if e["event"] == "refused"]
    assert refused, [e["event"] for e in audit]
    holder = refused[0]["holder"]
    assert (
        refused[0]["code"] == "pipeline_locked" and holder["host"] and holder["pid"] and holder["started_at"]
    )
    assert holder["owner"].startswith(f"{dag_id}/run/"), holder
    spans = engine_spans(audit)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end is not None and end <= start, f"two engines at once: {spans}"
    written = read_jsonl(deploy.output_dir / "deploy-shared")
    assert positions(written) == list(range(records)), f"{len(written)} records written"

    states = {run_id: w.run["state"] for run_id, w in watches.items()}
    logs = {
        run_id: api.log(dag_id, run_id, "run", w.tis["run"]["try_number"]) for run_id, w in watches.items()
    }
    refused_runs = [r for r, text in logs.items() if "pipeline_locked" in text or "already running" in text]
    assert refused_runs, "no task log tells of the refusal"
    assert all(s in TERMINAL_RUN_STATES for s in states.values())
    first_end = spans[0][1]
    print(
        f"\nverified: two DAG runs on one pipeline: {len(refused)} engine start(s) refused with "
        f"pipeline_locked while {holder['owner']} (pid {holder['pid']}) held the lock; {len(spans)} engine "
        f"run(s), never two at once (first ended {first_end}); {records} records each written once; DAG runs "
        f"ended {states} (tries {[w.tis['run']['try_number'] for w in watches.values()]}, states "
        f"{[w.seen['run'] for w in watches.values()]}); pipeline status sequence {statuses}"
    )
    assert all(s == "success" for s in states.values()), states


def test_killed_task_process_retry_reattaches(deploy: Deployment, killed_run: KilledRun) -> None:
    """Case 8: SIGKILL the task process while its engine runs (the DAG run started with the session:
    KilledRun, deployment.py). The engine runs on in its own session; the retry (retries=1) finds its own
    earlier engine holding the lock and reattaches instead of submitting a second one; every record
    arrives once."""
    api, dag_id, records = deploy.api, KILLED_DAG, 6000
    state = PipelineState.of(deploy.state_dir, "deploy-killed")
    watch = killed_run.result(timeout=540)
    run_id, killed = killed_run.run_id, killed_run.killed
    assert run_id is not None and killed, f"the engine was never seen running: {watch.seen}"
    ti = watch.tis["run"]
    tries = {t["try_number"]: t["state"] for t in api.tries(dag_id, run_id, "run")}
    first_log = api.log(dag_id, run_id, "run", 1)
    audit = state.read_audit()
    names = [e["event"] for e in audit]
    print(
        f"\nobserved: killed task process {killed['pid']} after {killed['batches']} batch(es): "
        f"{killed['tree']}\n  task states seen {watch.seen['run']}, tries {tries}; audit {names}\n"
        f"  end of try 1's log: {first_log.splitlines()[-3:]}"
    )
    assert watch.run["state"] == "success", watch.seen
    assert ti["try_number"] == 2, ti
    second_log = api.log(dag_id, run_id, "run", 2)
    ended = [e["time"] for e in audit if e["event"] in ("stopped", "fault")]
    try_2 = (api.tries(dag_id, run_id, "run")[-1] or {}).get("start_date")
    assert "Reattaching" in second_log, f"engine ended {ended}, try 2 started {try_2}: {second_log[-2000:]}"
    reattached = [e for e in audit if e["event"] == "reattached"]
    assert len(reattached) == 1 and reattached[0]["holder"]["owner"] == f"{dag_id}/run/{run_id}/-1"
    assert names.count("started") == 1 and "refused" not in names, names
    written = read_jsonl(deploy.output_dir / "deploy-killed")
    assert positions(written) == list(range(records)), f"{len(written)} records written"
    # What Airflow did with the killed try: the supervisor's and the scheduler's account of it.
    scheduler = [
        line
        for line in deploy.service_log("scheduler").splitlines()
        if (dag_id in line and run_id in line and "try_number=2" not in line)
        or (f"pid={killed['pid']}" in line and "socket" in line)
    ]
    said = [
        f"{((log_time(line) or killed_at(killed)) - killed_at(killed)).total_seconds():+.0f}s {summary}"
        for line in scheduler
        for key, summary in SUPERVISOR_AND_SCHEDULER.items()
        if key in line
    ]
    up_for_retry = watch.first_seen.get(("run", "up_for_retry"))
    print(
        f"verified: SIGKILL of the task process (pid {killed['pid']}) left its engine running; Airflow "
        f"retried the task (tries {tries}; up_for_retry seen "
        f"{(up_for_retry - killed['at']) if up_for_retry else float('nan'):.0f} s after the kill) and try 2 "
        f"reattached to that engine (audit 'reattached', one 'started', no second engine); all {records} "
        f"records written once. Airflow after the kill (seconds after it): {said}"
    )


SUPERVISOR_AND_SCHEDULER = {
    "Process exited with open sockets": "supervisor: process exited with open sockets, cleaned up after timeout",
    "Received executor event": "scheduler: executor event",
    "state attribute is running": "scheduler: 'finished with state success, but ... state attribute is running'",
    "Marking task as UP_FOR_RETRY": "scheduler: marking task as UP_FOR_RETRY",
    "Marking task as FAILED": "scheduler: marking task as FAILED",
}


def killed_at(killed: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(killed["at"], UTC)


def log_time(line: str) -> datetime | None:
    match = re.match(r"\s*(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:\.\d+)?)", line)
    if not match:
        return None
    return datetime.fromisoformat(f"{match.group(1)}T{match.group(2)}").replace(tzinfo=UTC)
