"""Hourly: process the orders that accumulated, recover from transient failures, publish the DLQ.

The pipeline (``pipelines/orders.yaml``) runs ``until_idle``: it reads what its source holds, delivers
it, and stops. A transient failure (a source or destination unreachable, a lost Spark task) is
restarted inside the same task after 5s, 10s, 20s (waited out in the worker), 40s, ... (deferred to the
triggerer: 30 s or more, ``[conduit] deferral_threshold``); at most 5 restarts in 30 minutes, then the
pipeline is degraded and the task fails without retry. Orders the ``error`` processor rejects go to the
DLQ; the task then emits an event on the ``conduit://orders/dlq`` asset, which
``conduit_orders_dlq_review`` is scheduled on.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_conduit.operators.pipeline import ConduitPipelineOperator
from airflow_conduit.recovery import RecoveryPolicy

# Where state and output go; the environment can move them (the tests do).
REPO = Path(__file__).resolve().parents[1]
STATE_DIR = os.environ.get("CONDUIT_STATE_DIR", str(REPO / ".conduit"))
OUTPUT_DIR = os.environ.get("CONDUIT_OUTPUT_DIR", str(REPO / "demo-output"))
with DAG(
    dag_id="conduit_orders_hourly",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["conduit", "example"],
    doc_md=__doc__,
) as dag:
    ConduitPipelineOperator(
        task_id="orders",
        pipeline_file="pipelines/orders.yaml",
        pipeline_id="orders",
        state_dir=STATE_DIR,
        mode="until_idle",
        recovery=RecoveryPolicy(
            min_delay=timedelta(seconds=5),
            max_delay=timedelta(minutes=5),
            backoff_factor=2,
            max_retries=5,
            max_retries_window=timedelta(minutes=30),
        ),
        env_vars={"CONDUIT_OUTPUT_DIR": OUTPUT_DIR, "CONDUIT_ORDERS_RECORDS": "1000"},
        execution_timeout=timedelta(minutes=50),
    )
