"""Issue 22, live DLQ events: scheduled on the *watched* DLQ asset of ``deploy-watched``, a continuous
pipeline that the test runs from the command line (no Airflow task runs it).

``deploy_dlq_watch`` reports the DLQ writes of the events that triggered each run. ``deploy_dlq_watch_review``
is the review DAG on the same asset: a ``ConduitDLQReviewOperator`` that nobody answers, so its timeout's
default (``leave``) ends each run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, task
from deploy_common import STATE_DIR, WORK_DIR

from airflow_conduit.assets import dlq_asset
from airflow_conduit.operators.dlq_review import ConduitDLQReviewOperator

# With the API connection: a write whose event a stopped triggerer may have stored is looked up, not
# announced again.
WATCHED_DLQ = dlq_asset(
    "deploy-watched",
    state_dir=STATE_DIR,
    watch=True,
    poll_interval=1.0,
    airflow_api_conn_id="conduit_airflow_api",
)
REVIEW_TIMEOUT = timedelta(seconds=20)

with DAG(
    "deploy_dlq_watch",
    schedule=[WATCHED_DLQ],
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
):

    @task
    def announced(**context: Any) -> list[dict[str, Any]]:
        from airflow_conduit.dlq_tools import read_dlq_event

        events = list((context.get("triggering_asset_events") or {}).get(WATCHED_DLQ, []))
        seen = []
        for event in events:
            entries = read_dlq_event(event.extra or {})
            payload = (event.extra or {}).get("payload") or {}
            print(
                f"DLQ write {payload.get('write')}: {len(entries)} record(s), errors {payload.get('error_codes')}"
            )
            seen.append({"write": payload.get("write"), "records": len(entries)})
        return seen

    announced()

with DAG(
    "deploy_dlq_watch_review",
    schedule=[WATCHED_DLQ],
    start_date=pendulum.datetime(2026, 1, 1),
    catchup=False,
):
    ConduitDLQReviewOperator(
        task_id="review",
        pipeline_file=f"{WORK_DIR}/dlq-watch.yaml",
        pipeline_id="deploy-watched",
        state_dir=STATE_DIR,
        asset=WATCHED_DLQ,
        sample_size=5,
        response_timeout=REVIEW_TIMEOUT,
        default_action="leave",
    )
