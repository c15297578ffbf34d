"""Case 1: a transient outage recovered through the triggerer, with the operator's defaults.

``deferrable=True`` and the recovery policy of the ``[conduit]`` section (Conduit's defaults: 1 s, 10 m,
2, -1, 5 m). The outage: the test holds the pipeline's run lock, so each engine run is refused
(transient, ``pipeline_locked``), until it saw the task ``deferred``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from deploy_common import generated

with DAG("deploy_outage_deferred", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    generated(
        "run",
        "deploy-outage",
        fault="passthrough",
        records=3000,
        batch=1000,
    )
