"""Case 8: the task process is SIGKILLed while its engine runs; the retry reattaches to that engine.

The engine runs about two minutes (12 batches of 10 s on one core): Airflow starts the retry only a
minute after the kill (the supervisor waits out ``[workers] socket_cleanup_timeout`` for the task's
sockets, which the engine inherited), and the engine must still be running then.
"""

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
        fault_env={"DEPLOY_SLOW_SECONDS": "0.02"},
        retries=1,
        retry_delay=timedelta(seconds=5),
    )
