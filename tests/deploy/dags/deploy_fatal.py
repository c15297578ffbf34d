"""Case 2: a fatal error fails the task at once, although it has retries."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from deploy_common import generated

with DAG("deploy_fatal", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    generated(
        "run", "deploy-fatal", fault="always_fatal", records=100, retries=2, retry_delay=timedelta(seconds=1)
    )
