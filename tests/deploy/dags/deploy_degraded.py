"""Case 3: an outage that never ends degrades the pipeline after 1 + max_retries engine runs."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from deploy_common import generated

from airflow_conduit.recovery import RecoveryPolicy

with DAG("deploy_degraded", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    generated(
        "run",
        "deploy-degraded",
        fault="always_transient",
        records=100,
        recovery=RecoveryPolicy(min_delay=1, max_retries=2, max_retries_window=timedelta(minutes=10)),
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
