"""Case 8: the task process is SIGKILLed while its engine runs; the retry reattaches to that engine."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from deploy_common import generated

with DAG("deploy_killed", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    generated(
        "run",
        "deploy-killed",
        fault="slow",
        records=6000,
        batch=500,
        fault_env={"DEPLOY_SLOW_SECONDS": "0.01"},
        retries=1,
        retry_delay=timedelta(seconds=5),
    )
