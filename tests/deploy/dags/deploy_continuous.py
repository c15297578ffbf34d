"""Case 5: a continuous pipeline watched by ``ConduitPipelineSensor``, stopped gracefully from outside."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from deploy_common import STATE_DIR, generated

from airflow_conduit.sensors.pipeline import ConduitPipelineSensor

with DAG("deploy_continuous", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    generated("pipeline", "deploy-continuous", fault="passthrough", records=-1, rate=50, mode="continuous")
    ConduitPipelineSensor(
        task_id="watch",
        pipeline_id="deploy-continuous",
        state_dir=STATE_DIR,
        newer_than="{{ dag_run.start_date }}",
        poke_interval=2,
        timeout=600,
        deferrable=True,
    )
