"""A continuous pipeline under a sensor, and the DLQ asset scheduling its review (cases 5 and 6)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from deployment import VENV_BIN, Deployment, DlqReview, read_jsonl, utc

from airflow_conduit.state import PipelineState

pytestmark = pytest.mark.deploy


def test_continuous_pipeline_stopped_gracefully_under_a_sensor(deploy: Deployment) -> None:
    """Case 5: mode="continuous" in one task, ConduitPipelineSensor (deferred) in another; once the
    pipeline has written batches, `airflow-conduit stop` stops it gracefully: both tasks succeed."""
    api, dag_id, pipeline = deploy.api, "deploy_continuous", "deploy-continuous"
    state = PipelineState.of(deploy.state_dir, pipeline)
    run_id = api.trigger(dag_id)
    stop: dict[str, object] = {}

    def stop_once_streaming(tis: dict) -> None:
        if stop or tis["watch"]["state"] != "deferred" or tis["pipeline"]["state"] != "running":
            return
        status = state.read_status() or {}
        started = utc(api.run(dag_id, run_id)["start_date"])
        updated = utc(status.get("updated_at"))
        if status.get("status") != "running" or not status.get("batches") or updated < started:
            return
        stop["batches"] = status["batches"]
        stop["at"] = time.time()
        stop["cli"] = subprocess.run(
            [str(VENV_BIN / "airflow-conduit"), "stop", pipeline, "--state-dir", str(deploy.state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    watch = api.wait_for_run(dag_id, run_id, timeout=900, on_poll=stop_once_streaming)
    assert stop, f"the pipeline was never seen streaming: {watch.seen}"
    assert stop["cli"].returncode == 0, (stop["cli"].stdout, stop["cli"].stderr)
    assert watch.run["state"] == "success", watch.seen
    assert {t: ti["state"] for t, ti in watch.tis.items()} == {"pipeline": "success", "watch": "success"}
    assert "deferred" in watch.seen["watch"], watch.seen

    operator = api.xcom(dag_id, run_id, "pipeline")
    sensor = api.xcom(dag_id, run_id, "watch")
    payload = state.read_exit_payload()
    assert payload["status"] == "stopped" and payload["exit_code"] == 0 and payload["error"] is None
    assert operator["status"] == "stopped" and operator["outcome"] == "stopped", operator
    assert sensor["status"] == "stopped" and sensor["ended_at"] == payload["ended_at"], sensor
    counts = payload["records"]
    assert counts["read"] > 0 and counts["acked"] == counts["read"], counts
    written = read_jsonl(deploy.output_dir / pipeline)
    assert len(written) == counts["acked"] and len({r["position"] for r in written}) == len(written)
    # The operator's env_vars reach spark-submit (the driver), not the executors on the worker.
    seen = {r["metadata"].get("deploy.executor.env_vars") for r in written}
    print(
        f"\nverified: a continuous pipeline streamed {counts['read']} records in {payload['batches']} "
        f"batches until `airflow-conduit stop`; the operator and the deferred sensor both succeeded "
        f"with exit payload status {payload['status']} (states {watch.seen}); the operator's env_vars "
        f"as the executors saw them: {sorted(seen)}"
    )


def test_dlq_event_schedules_the_review_which_replays_the_fixed_records(
    deploy: Deployment, dlq_review: DlqReview
) -> None:
    """Case 6: the producer's DLQ asset event (REST API) created the review DAG's run, which read the
    event's records, fixed them and replayed them through a pipeline to the destination."""
    review = dlq_review
    counts = review.producer_xcom["records"]
    assert counts["read"] == 1000 and counts["dlq"] > 0 and counts["acked"] + counts["dlq"] == 1000
    event = review.event
    assert event["source_dag_id"] == "deploy_orders" and event["source_run_id"] == review.producer_run
    extra = event["extra"]
    assert extra["records"] == counts["dlq"] and extra["error_codes"] == ["amount is a multiple of 10"]
    assert extra["nodes"] == ["deploy-orders:reject-round-amounts"]
    assert [r["dag_id"] for r in event["created_dagruns"]] == ["deploy_orders_dlq_review"]
    assert event["created_dagruns"][0]["run_id"] == review.review_run
    assert review.review_watch.run["run_type"] == "asset_triggered", review.review_watch.run
    assert review.review_watch.run["state"] == "success", review.review_watch.seen
    assert review.review_xcom == {
        "events": 1,
        "records": counts["dlq"],
        "replayed": counts["dlq"],
        "dropped": 0,
    }, review.review_xcom
    replayed = read_jsonl(deploy.output_dir / "deploy-orders-replayed")
    assert len(replayed) == counts["dlq"]
    assert all(r["payload"]["after"]["amount"] % 10 == 1 for r in replayed)
    assert all("conduit.replay.of" in r["metadata"] for r in replayed)
    originals = read_jsonl(deploy.output_dir / "deploy-orders")
    assert len(originals) == counts["acked"]
    keys = {json.dumps(r["key"], sort_keys=True) for r in [*originals, *replayed]}
    assert len(keys) == 1000  # every order delivered: first time, or fixed by the review
    print(
        f"\nverified: {counts['dlq']} of 1000 orders went to the DLQ; its asset event (id {event['id']}) "
        f"created the review run {review.review_run} (asset_triggered), which replayed the "
        f"{counts['dlq']} fixed orders to the destination: all 1000 orders delivered"
    )
