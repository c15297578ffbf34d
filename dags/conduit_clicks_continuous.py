"""A continuous pipeline, watched by a sensor.

``clicks`` streams continuously (``pipelines/clicks.yaml``) and is asked to stop gracefully after 55
minutes, so each hourly run hands over to the next. ``watch`` follows the pipeline through its state
dir: in the worker for the first 30 s (``[conduit] deferral_threshold``), then in the triggerer (no worker
slot held). It succeeds when the pipeline stops gracefully, fails without retry if it is degraded, and
fails retryably on a transient failure nobody recovers. ``report`` logs the
counters the pipeline stopped with.

The sensor can as well watch a pipeline started outside Airflow (``airflow-conduit run``) through the
same state dir.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_conduit.operators.pipeline import ConduitPipelineOperator
from airflow_conduit.recovery import RecoveryPolicy
from airflow_conduit.sensors.pipeline import ConduitPipelineSensor

# Where state and output go; the environment can move them (the tests do).
REPO = Path(__file__).resolve().parents[1]
STATE_DIR = os.environ.get("CONDUIT_STATE_DIR", str(REPO / ".conduit"))
OUTPUT_DIR = os.environ.get("CONDUIT_OUTPUT_DIR", str(REPO / "demo-output"))
RUN_FOR = timedelta(seconds=float(os.environ.get("CONDUIT_CLICKS_RUN_SECONDS", 55 * 60)))

with DAG(
    dag_id="conduit_clicks_continuous",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["conduit", "example"],
    doc_md=__doc__,
) as dag:
    clicks = ConduitPipelineOperator(
        task_id="clicks",
        pipeline_file="pipelines/clicks.yaml",
        pipeline_id="clicks",
        state_dir=STATE_DIR,
        mode="continuous",
        stop_after=RUN_FOR,
        recovery=RecoveryPolicy(max_retries=10, max_retries_window=timedelta(minutes=15)),
        env_vars={"CONDUIT_OUTPUT_DIR": OUTPUT_DIR},
    )

    watch = ConduitPipelineSensor(
        task_id="watch",
        pipeline_id="clicks",
        state_dir=STATE_DIR,
        newer_than="{{ dag_run.start_date }}",
        poke_interval=5,
        timeout=RUN_FOR.total_seconds() + 600,
        deferrable=True,
    )

    @task
    def report(payload: dict) -> dict:
        records = payload.get("records") or {}
        print(f"clicks stopped after {payload.get('batches')} batches: {records}")
        return records

    report(watch.output)
