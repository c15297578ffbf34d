"""Case 7: two DAG runs of this DAG drive one pipeline at the same time."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from deploy_common import generated

from airflow_conduit.recovery import RecoveryPolicy

with DAG("deploy_concurrent", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    generated(
        "run",
        "deploy-shared",
        fault="slow",
        records=4000,
        batch=500,
        fault_env={"DEPLOY_SLOW_SECONDS": "0.005"},
        recovery=RecoveryPolicy(min_delay=5, max_retries=10, max_retries_window=timedelta(minutes=10)),
    )
