"""Issue 22, live DLQ events, under the deployment's real scheduler and triggerer.

A continuous pipeline started from the command line (no Airflow task runs it) nacks records at a steady
rate into its DLQ. ``deploy_dlq_watch`` is scheduled on its watched DLQ asset
(``dlq_asset(..., watch=True)``), and so is the review DAG ``deploy_dlq_watch_review``
(``ConduitDLQReviewOperator``, unanswered: its 20 s timeout's default, ``leave``, ends each run). The
triggerer follows the DLQ store and turns each committed DLQ write into one asset event. The triggerer is
restarted while the pipeline runs, gracefully (SIGTERM) and then as in a crash (SIGKILL). Checked: the
first consumer run and the first review run start (``start_date``, not only queued) before the pipeline
stops; a review ends by its real timeout with ``leave``; the asset's events name every DLQ write of the
store exactly once, none lost or doubled across the restarts (the watcher has an API connection: what a
stopped triggerer offered is looked up there, not announced again).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from deployment import VENV_BIN, ApiError, Deployment, restart_service, tail, utc

from airflow_conduit import dlq_batches, dlq_tools
from airflow_conduit.state import PipelineState

pytestmark = pytest.mark.deploy

PIPELINE_ID = "deploy-watched"
DAG_ID = "deploy_dlq_watch"
REVIEW_DAG_ID = "deploy_dlq_watch_review"
ASSET_URI = f"conduit://{PIPELINE_ID}/dlq"
PIPELINE = """\
version: "2.2"
pipelines:
  - id: deploy-watched
    connectors:
      - id: numbers
        type: source
        plugin: builtin:generator
        settings:
          rate: "6"
          collections: numbers
          seed: "11"
          format.type: structured
          format.options.n: int
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {output}
    processors:
      - id: reject-some
        plugin: error
        condition: CAST(.Payload.After.n AS BIGINT) % 3 = 0
        settings:
          message: n is a multiple of 3
    dead-letter-queue:
      plugin: builtin:log
      window-size: 0
"""
WAIT = 240.0
LIVE_WITHIN = 15.0
"""Seconds from a DLQ write to its asset event: the watcher polls every second; a loaded machine."""


def wait_until(what: str, check: Callable[[], Any], deploy: Deployment, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deploy.check_alive()
        result = check()
        if result:
            return result
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:.0f}s\n{deploy.tails(60)}")


def written_at(state: PipelineState) -> dict[str, datetime]:
    """When each committed DLQ write's last file was written (its files' newest mtime)."""
    return {
        write.prefix: datetime.fromtimestamp(
            max((state.dlq_dir / name).stat().st_mtime for name in write.files), UTC
        )
        for write in dlq_batches.committed_writes(state.dlq_dir, {})
    }


def store_writes(state: PipelineState) -> set[str]:
    """The committed DLQ writes in the store (what the watcher may announce)."""
    return {w.prefix for w in dlq_batches.committed_writes(state.dlq_dir, {})}


def announced_at(deploy: Deployment) -> list[tuple[datetime, dict[str, Any]]]:
    """The watched asset's events as (when Airflow stored it, payload), oldest first."""
    asset = deploy.api.asset(ASSET_URI)
    if asset is None:
        return []
    for attempt in range(10):
        try:
            events = deploy.api.get(
                "/api/v2/assets/events", asset_id=asset["id"], order_by="timestamp", limit=1000
            )
            break
        except ApiError as error:
            # Airflow 3.3.2 answers 500 while an event's DAG run is queued (no start_date yet).
            if error.status < 500 or attempt == 9:
                raise
            time.sleep(3)
    return [
        (
            utc(event["timestamp"]) or datetime.min.replace(tzinfo=UTC),
            (event.get("extra") or {}).get("payload") or {},
        )
        for event in events["asset_events"]
    ]


def announced(deploy: Deployment) -> list[dict[str, Any]]:
    """The payloads of the watched asset's events, oldest first."""
    return [payload for _, payload in announced_at(deploy)]


def consumer_runs(deploy: Deployment, dag_id: str = DAG_ID) -> list[dict[str, Any]]:
    return deploy.api.get(f"/api/v2/dags/{dag_id}/dagRuns", limit=1000)["dag_runs"]


def first_start(deploy: Deployment, dag_id: str) -> datetime | None:
    """When the DAG's earliest run began running (a run only queued has no ``start_date``)."""
    starts = [utc(run.get("start_date")) for run in consumer_runs(deploy, dag_id)]
    return min((start for start in starts if start is not None), default=None)


def timed_out_review(deploy: Deployment) -> dict[str, Any] | None:
    """The outcome of a review run that ended by its timeout's default, if one has."""
    for run in consumer_runs(deploy, REVIEW_DAG_ID):
        if run.get("state") != "success":
            continue
        outcome = deploy.api.xcom(REVIEW_DAG_ID, run["dag_run_id"], "review")
        if isinstance(outcome, dict) and outcome.get("timed_out"):
            return outcome
    return None


def test_dlq_writes_announced_live_once_each_across_triggerer_restarts(deploy: Deployment) -> None:
    state = PipelineState.of(deploy.state_dir, PIPELINE_ID)
    pipeline = deploy.work_dir / "dlq-watch.yaml"
    pipeline.write_text(PIPELINE.format(output=deploy.output_dir / PIPELINE_ID))
    log = deploy.root / "logs" / "dlq-watch-engine.log"
    with log.open("wb") as out:
        engine = subprocess.Popen(
            [
                str(VENV_BIN / "airflow-conduit"),
                *("run", str(pipeline), "--state-dir", str(deploy.state_dir), "--master", "local[1]"),
            ],
            env=deploy.env,
            cwd=deploy.work_dir,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # Live: a consumer run and a review run start while the pipeline runs.
        for dag_id in (DAG_ID, REVIEW_DAG_ID):
            wait_until(
                f"a {dag_id} run started by a live DLQ event", lambda d=dag_id: first_start(deploy, d), deploy
            )
        assert engine.poll() is None, tail(log)
        before_restart = len(store_writes(state))
        announced_before_restart = len(announced(deploy))
        # (signal sent, triggerer healthy again) per restart
        restarts: list[tuple[datetime, datetime]] = []
        signalled = datetime.now(UTC)
        restart_service(deploy, "triggerer")
        restarts.append((signalled, datetime.now(UTC)))
        wait_until(
            "two more DLQ writes after the triggerer restart",
            lambda: len(store_writes(state)) >= before_restart + 2,
            deploy,
        )
        before_kill = len(store_writes(state))
        signalled = datetime.now(UTC)
        restart_service(deploy, "triggerer", kill=True)
        restarts.append((signalled, datetime.now(UTC)))
        wait_until(
            "two more DLQ writes after the triggerer was killed",
            lambda: len(store_writes(state)) >= before_kill + 2,
            deploy,
        )
        assert engine.poll() is None, tail(log)
    finally:
        subprocess.run(
            [str(VENV_BIN / "airflow-conduit"), "stop", PIPELINE_ID, "--state-dir", str(deploy.state_dir)],
            env=deploy.env,
            capture_output=True,
            timeout=60,
        )
        try:
            engine.wait(timeout=180)
        except subprocess.TimeoutExpired:
            engine.kill()
            raise
    exit_payload = json.loads((state.root / "exit.json").read_text())
    assert exit_payload["exit_code"] == 0, tail(log)
    stopped_at = utc(exit_payload["ended_at"])
    assert stopped_at is not None

    writes = store_writes(state)
    assert len(writes) >= 4, f"too few DLQ writes to judge: {sorted(writes)}"
    wait_until(
        "an event for every DLQ write",
        lambda: {p.get("write") for p in announced(deploy)} >= writes,
        deploy,
    )
    time.sleep(10)  # ten of the watcher's polls: a doubled event would have come by now
    events = announced_at(deploy)
    payloads = [payload for _, payload in events]
    counts = Counter(p.get("write") for p in payloads)
    assert set(counts) == writes, (
        f"announced {sorted(counts)} but the store holds {sorted(writes)}"
    )  # none lost
    # Exactly once: the watcher settles what a stopped triggerer offered through the REST API
    # (airflow_api_conn_id) instead of announcing it again.
    doubled = {write: n for write, n in counts.items() if n > 1}
    for write in doubled:
        times = [when for when, payload in events if payload.get("write") == write]
        raise AssertionError(f"DLQ write {write} announced at {times}, restarts (signal, back) at {restarts}")
    print(
        f"verified: {len(writes)} DLQ writes, {len(payloads)} events, doubled by a restart: {doubled or 'none'}"
    )
    # A triggerer that died after Airflow stored a write's event and before the write reached the ledger:
    # take the last write out of the ledger and leave it offered. The watcher asks the API, finds the
    # event, puts the write back in the ledger and does not announce it again.
    last = max(writes)
    with dlq_batches.announcing(state) as ledger:
        for name in [name for name in ledger if dlq_batches.write_prefix(name) == last]:
            del ledger[name]
    dlq_batches.mark_offered(state, last, now=max(when for when, p in events if p.get("write") == last))
    wait_until("the watcher settles the offer", lambda: not dlq_batches.read_offered(state), deploy, 60)
    time.sleep(5)
    assert Counter(p.get("write") for p in announced(deploy))[last] == 1, "a stored event announced again"
    assert any(dlq_batches.write_prefix(name) == last for name in dlq_batches.read_announced(state))

    # Live: before the first restart, a write's event is stored within seconds of the write. (After a
    # SIGKILL, Airflow hands the trigger to the new triggerer only once the old one's heartbeat is stale:
    # tens of seconds, Airflow's own wait, so those writes are not timed.)
    write_times = written_at(state)
    first_signal = restarts[0][0]
    lags = {
        write: (stored - written).total_seconds()
        for write, written in write_times.items()
        if (stored := min(when for when, payload in events if payload.get("write") == write)) < first_signal
    }
    assert lags and max(lags.values()) < LIVE_WITHIN, f"seconds from DLQ write to its event: {lags}"
    print(f"seconds from a DLQ write to its asset event before the restarts: max {max(lags.values()):.1f}")
    payloads = [payload for _, payload in events]
    for payload in payloads:
        entries = dlq_tools.read_dlq_event(payload)
        assert payload["records"] == len(entries) > 0
        assert payload["error_codes"] == ["n is a multiple of 3"]
    assert sum(p["records"] for p in payloads) == len(dlq_tools.read_dlq(state.dlq_dir))

    assert 0 < announced_before_restart < len(payloads)
    for dag_id in (DAG_ID, REVIEW_DAG_ID):
        started = first_start(deploy, dag_id)
        assert started is not None and started < stopped_at, (
            f"first {dag_id} run started {started}, pipeline stopped {stopped_at}"
        )
        print(f"first {dag_id} run started {(stopped_at - started).total_seconds():.0f}s before the stop")
    # Nobody answers the review: the HITL timeout (in the triggerer) takes the default, leave.
    outcome = wait_until("a review ended by its timeout", lambda: timed_out_review(deploy), deploy)
    assert outcome["action"] == "leave" and outcome["records"] == outcome["left"] > 0, outcome
    print(
        f"\nDLQ writes {len(writes)}, asset events {len(payloads)} ({announced_before_restart} before the "
        f"triggerer restart), consumer runs {len(consumer_runs(deploy))}, review runs "
        f"{len(consumer_runs(deploy, REVIEW_DAG_ID))}; a timed-out review: {outcome['records']} record(s) left"
    )
