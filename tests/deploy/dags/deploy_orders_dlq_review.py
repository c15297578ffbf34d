"""Case 6, the consumer: scheduled on ``conduit://deploy-orders/dlq``; reads the triggering event's DLQ
records, fixes them and replays them through ``pipelines/orders-replay.yaml`` (as
``dags/conduit_orders_dlq_review.py``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pendulum
from airflow.sdk import DAG, task
from deploy_common import OUTPUT_DIR, STATE_DIR, WORK_DIR

from airflow_conduit.assets import dlq_asset
from airflow_conduit.operators.pipeline import ConduitPipelineOperator

ORDERS_DLQ = dlq_asset("deploy-orders")
REPLAY_DIR = f"{WORK_DIR}/deploy-orders-replay-inbox"


def fix(record: dict[str, Any]) -> dict[str, Any] | None:
    """Nudge the amount off a multiple of 10; drop records without one."""
    after = (record.get("payload") or {}).get("after")
    if not isinstance(after, dict) or not isinstance(after.get("amount"), int):
        return None
    return {**record, "payload": {**record["payload"], "after": {**after, "amount": after["amount"] + 1}}}


with DAG(
    "deploy_orders_dlq_review",
    schedule=[ORDERS_DLQ],
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
):

    @task(inlets=[ORDERS_DLQ])
    def review(**context: Any) -> dict[str, Any]:
        from airflow_conduit.dlq_tools import read_dlq_event, replay

        events = list((context.get("triggering_asset_events") or {}).get(ORDERS_DLQ, []))
        entries = [entry for event in events for entry in read_dlq_event(event.extra or {})]
        for (node, error), n in Counter((e.node, e.error) for e in entries).most_common():
            print(f"{n} record(s) failed at {node}: {error}")
        path, replayed, dropped = replay(entries, REPLAY_DIR, fix=fix)
        print(f"replaying {replayed} fixed record(s) from {path}; {dropped} dropped")
        return {"events": len(events), "records": len(entries), "replayed": replayed, "dropped": dropped}

    replay_fixed = ConduitPipelineOperator(
        task_id="replay",
        pipeline_file="pipelines/orders-replay.yaml",
        pipeline_id="deploy-orders-replay",
        state_dir=STATE_DIR,
        env_vars={"CONDUIT_OUTPUT_DIR": OUTPUT_DIR, "CONDUIT_REPLAY_DIR": REPLAY_DIR},
    )

    review() >> replay_fixed
