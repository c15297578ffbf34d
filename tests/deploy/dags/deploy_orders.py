"""Case 6, the producer: orders whose amount is a multiple of 10 go to the DLQ (``pipelines/orders.yaml``),
and the task emits an event on ``conduit://deploy-orders/dlq``, which ``deploy_orders_dlq_review`` is
scheduled on (as ``dags/conduit_orders_hourly.py``)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from deploy_common import OUTPUT_DIR, STATE_DIR

from airflow_conduit.operators.pipeline import ConduitPipelineOperator

with DAG("deploy_orders", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    ConduitPipelineOperator(
        task_id="orders",
        pipeline_file="pipelines/orders.yaml",
        pipeline_id="deploy-orders",
        state_dir=STATE_DIR,
        env_vars={"CONDUIT_OUTPUT_DIR": OUTPUT_DIR, "CONDUIT_ORDERS_RECORDS": "1000"},
    )
