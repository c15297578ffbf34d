"""Case 4: Airflow's retries with Conduit's rules (``retry_policy=ConduitRetryPolicy(...)``).

The first engine run fails with a transient error; Airflow retries the task, and the second try's run
succeeds.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from deploy_common import STATE_DIR, generated

from airflow_conduit.operators import ConduitRetryPolicy
from airflow_conduit.recovery import RecoveryPolicy

with DAG("deploy_retry_policy", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    generated(
        "run",
        "deploy-retry",
        fault="fail_first_runs",
        records=500,
        fault_env={"DEPLOY_AUDIT_LOG": f"{STATE_DIR}/deploy-retry/audit.jsonl", "DEPLOY_FAIL_RUNS": "1"},
        retry_policy=ConduitRetryPolicy(RecoveryPolicy(min_delay=2, max_retries=3)),
    )
