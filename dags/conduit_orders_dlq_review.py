"""Review and replay the orders that reached the DLQ.

Scheduled on the ``conduit://orders/dlq`` asset: each event of ``conduit_orders_hourly`` that put
records into the DLQ starts a run. ``review`` reads exactly those records back (the event's extra says
where), logs why they failed, fixes what can be fixed (an amount that is a multiple of 10 is raised by
one cent) and writes them for ``replay``, which runs ``pipelines/orders-replay.yaml`` to deliver them.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_conduit.assets import dlq_asset
from airflow_conduit.operators.pipeline import ConduitPipelineOperator

# Where state and output go; the environment can move them (the tests do).
REPO = Path(__file__).resolve().parents[1]
STATE_DIR = os.environ.get("CONDUIT_STATE_DIR", str(REPO / ".conduit"))
OUTPUT_DIR = os.environ.get("CONDUIT_OUTPUT_DIR", str(REPO / "demo-output"))
REPLAY_DIR = os.environ.get("CONDUIT_REPLAY_DIR", str(Path(OUTPUT_DIR) / "orders-replay-inbox"))
ORDERS_DLQ = dlq_asset("orders")


def fix(record: dict[str, Any]) -> dict[str, Any] | None:
    """The repair: nudge the amount off a multiple of 10; drop records without one."""
    after = (record.get("payload") or {}).get("after")
    if not isinstance(after, dict) or not isinstance(after.get("amount"), int):
        return None
    after = {**after, "amount": after["amount"] + 1}
    return {**record, "payload": {**record["payload"], "after": after}}


with DAG(
    dag_id="conduit_orders_dlq_review",
    schedule=[ORDERS_DLQ],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["conduit", "example", "dlq"],
    doc_md=__doc__,
) as dag:

    @task(inlets=[ORDERS_DLQ])
    def review(**context: Any) -> dict[str, Any]:
        from airflow_conduit.dlq_tools import read_dlq_event, replay

        events = list((context.get("triggering_asset_events") or {}).get(ORDERS_DLQ, []))
        if not events:  # a manual run: take the latest event
            latest = list(context["inlet_events"][ORDERS_DLQ])[-1:]
            events = latest
        entries = [entry for event in events for entry in read_dlq_event(event.extra or {})]
        for (node, error), n in Counter((e.node, e.error) for e in entries).most_common():
            print(f"{n} record(s) failed at {node}: {error}")
        path, replayed, dropped = replay(entries, REPLAY_DIR, fix=fix)
        print(f"replaying {replayed} fixed record(s) from {path}; {dropped} dropped")
        return {"records": len(entries), "replayed": replayed, "dropped": dropped, "file": str(path)}

    replay_fixed = ConduitPipelineOperator(
        task_id="replay",
        pipeline_file="pipelines/orders-replay.yaml",
        pipeline_id="orders-replay",
        state_dir=STATE_DIR,
        env_vars={"CONDUIT_OUTPUT_DIR": OUTPUT_DIR, "CONDUIT_REPLAY_DIR": REPLAY_DIR},
    )

    review() >> replay_fixed
