"""Issue 22, live DLQ events, under the deployment's real scheduler and triggerer.

A continuous pipeline started from the command line (no Airflow task runs it) nacks records at a steady
rate into its DLQ. ``deploy_dlq_watch`` is scheduled on its watched DLQ asset
(``dlq_asset(..., watch=True)``): the triggerer follows the DLQ store and turns each committed DLQ write
into one asset event. The triggerer is restarted while the pipeline runs, gracefully (SIGTERM) and then
as in a crash (SIGKILL). Checked: the first consumer
run starts before the pipeline stops, and the asset's events name every DLQ write of the store exactly
once, none lost across the restarts; a write may come twice only as docs/airflow.md says (its event
stored just before a triggerer stop and not yet confirmed to the trigger).
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
from deployment import VENV_BIN, Deployment, restart_service, tail, utc

from airflow_conduit import dlq_batches, dlq_tools
from airflow_conduit.state import PipelineState

pytestmark = pytest.mark.deploy

PIPELINE_ID = "deploy-watched"
DAG_ID = "deploy_dlq_watch"
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


def wait_until(what: str, check: Callable[[], Any], deploy: Deployment, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deploy.check_alive()
        result = check()
        if result:
            return result
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:.0f}s\n{deploy.tails(60)}")


def store_writes(state: PipelineState) -> set[str]:
    """The committed DLQ writes in the store (what the watcher may announce)."""
    return {w.prefix for w in dlq_batches.committed_writes(state.dlq_dir, {})}


def announced_at(deploy: Deployment) -> list[tuple[datetime, dict[str, Any]]]:
    """The watched asset's events as (when Airflow stored it, payload), oldest first."""
    asset = deploy.api.asset(ASSET_URI)
    if asset is None:
        return []
    events = deploy.api.get("/api/v2/assets/events", asset_id=asset["id"], order_by="timestamp", limit=1000)
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


def consumer_runs(deploy: Deployment) -> list[dict[str, Any]]:
    return deploy.api.get(f"/api/v2/dags/{DAG_ID}/dagRuns", limit=1000)["dag_runs"]


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
        # Live: a consumer run starts while the pipeline runs.
        first_runs = wait_until(
            "a deploy_dlq_watch run from a live DLQ event", lambda: consumer_runs(deploy), deploy
        )
        assert engine.poll() is None, tail(log)
        before_restart = len(store_writes(state))
        announced_before_restart = len(announced(deploy))
        restart_service(deploy, "triggerer")
        restarts = [datetime.now(UTC)]
        wait_until(
            "two more DLQ writes after the triggerer restart",
            lambda: len(store_writes(state)) >= before_restart + 2,
            deploy,
        )
        before_kill = len(store_writes(state))
        restart_service(deploy, "triggerer", kill=True)
        restarts.append(datetime.now(UTC))
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
    # The documented gap (docs/airflow.md, "Across triggerer restarts"): a triggerer stopped after Airflow
    # stored an event and before it confirmed it to the trigger announces that write once more. Only that:
    # a write at most twice, its first event stored before a restart finished and its second after it.
    doubled = {write: n for write, n in counts.items() if n > 1}
    for write, n in doubled.items():
        times = [when for when, payload in events if payload.get("write") == write]
        assert n == 2 and any(times[0] <= restart < times[1] for restart in restarts), (
            f"DLQ write {write} announced {n} times at {times}, restarts at {restarts}"
        )
    print(
        f"verified: {len(writes)} DLQ writes, {len(payloads)} events, doubled by a restart: {doubled or 'none'}"
    )
    payloads = [payload for _, payload in events if counts[payload.get("write")] == 1] + [
        next(p for _, p in events if p.get("write") == write) for write in doubled
    ]
    for payload in payloads:
        entries = dlq_tools.read_dlq_event(payload)
        assert payload["records"] == len(entries) > 0
        assert payload["error_codes"] == ["n is a multiple of 3"]
    assert sum(p["records"] for p in payloads) == len(dlq_tools.read_dlq(state.dlq_dir))

    assert 0 < announced_before_restart < len(payloads)
    first_start = min(utc(run.get("start_date") or run.get("queued_at")) or stopped_at for run in first_runs)
    assert first_start < stopped_at, (
        f"first consumer run started {first_start}, pipeline stopped {stopped_at}"
    )
    print(
        f"\nDLQ writes {len(writes)}, asset events {len(payloads)} ({announced_before_restart} before the "
        f"triggerer restart), consumer runs {len(consumer_runs(deploy))}; "
        f"first run started {(stopped_at - first_start).total_seconds():.0f}s before the pipeline stopped"
    )
