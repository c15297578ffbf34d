"""Shared by the deployment tests' DAGs (not a DAG file: ``.airflowignore`` leaves it out of parsing).

The deployment (``tests/deploy/deployment.py``) sets the paths in the environment of every Airflow
service; the tests compute the same paths from the same root.
"""

from __future__ import annotations

import os
from typing import Any

from airflow_conduit.operators.pipeline import ConduitPipelineOperator

STATE_DIR = os.environ["CONDUIT_STATE_DIR"]
OUTPUT_DIR = os.environ["CONDUIT_OUTPUT_DIR"]
WORK_DIR = os.environ["DEPLOY_WORK_DIR"]
HELPERS_DIR = os.environ["DEPLOY_HELPERS_DIR"]


def generated(
    task_id: str,
    pipeline_id: str,
    *,
    fault: str,
    records: int,
    batch: int | None = None,
    rate: int | None = None,
    fault_env: dict[str, str] | None = None,
    **kwargs: Any,
) -> ConduitPipelineOperator:
    """A ``ConduitPipelineOperator`` on ``pipelines/generated.yaml``: ``records`` generated records through
    the ``custom.python`` processor ``deploy_faults:FAULT`` into ``OUTPUT_DIR/PIPELINE_ID``.

    ``fault_env`` reaches the processor on the Spark worker as ``spark.executorEnv.*`` (an executor does
    not inherit the environment of ``spark-submit``), and the driver through ``env_vars``.
    """
    env = {
        "DEPLOY_PIPELINE": pipeline_id,
        "DEPLOY_RECORDS": str(records),
        "DEPLOY_FAULT": fault,
        "DEPLOY_OUTPUT": f"{OUTPUT_DIR}/{pipeline_id}",
        "DEPLOY_HELPERS_DIR": HELPERS_DIR,
        **({"DEPLOY_BATCH": str(batch)} if batch else {}),
        **({"DEPLOY_RATE": str(rate)} if rate else {}),
    }
    executor_env = dict(fault_env or {})
    return ConduitPipelineOperator(
        task_id=task_id,
        pipeline_file="pipelines/generated.yaml",
        pipeline_id=pipeline_id,
        state_dir=STATE_DIR,
        env_vars={**env, **executor_env},
        conf={f"spark.executorEnv.{name}": value for name, value in executor_env.items()},
        **kwargs,
    )
