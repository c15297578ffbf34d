"""A person reviews the orders that reached the DLQ, and a degraded orders pipeline, in the Airflow UI.

``conduit_orders_dlq_review`` is scheduled on the ``conduit://orders/dlq`` asset: each event (of
``conduit_orders_hourly``, or a live one) starts a run whose ``review`` task shows exactly those records
in a review form (the count, the errors by failing node, a sample) and waits for an answer:

- **replay**: send them through ``pipelines/orders.yaml`` as it is now, one record per micro-batch (fix
  the file first, e.g. the ``reject-round-amounts`` condition, or records fail again and stay queued);
- **acknowledge**: skip them for good; the reason and who gave it go to the audit log;
- **leave**: nothing now (also what happens when nobody answers within 4 hours).

``conduit_orders_degraded_review`` (``schedule=None``: nothing starts it on its own; trigger it by hand, or
from an alert, when ``orders`` is degraded) shows the record(s) the pipeline stopped on (DLQ threshold
exceeded, or a fatal error: as ``airflow-conduit inspect`` shows them); on **acknowledge** (skip them, as
``airflow-conduit ack``) or **replay** (read them again after a fix) ``resume`` runs the pipeline again,
past them. With nothing degraded it ends at once.

Answers go to the task log, the pipeline's audit log and the Conduit page (``/conduit/pipelines/orders``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_conduit.assets import dlq_asset
from airflow_conduit.operators.dlq_review import ConduitDLQReviewOperator
from airflow_conduit.operators.pipeline import ConduitPipelineOperator

# Where state and output go; the environment can move them (the tests do).
REPO = Path(__file__).resolve().parents[1]
STATE_DIR = os.environ.get("CONDUIT_STATE_DIR", str(REPO / ".conduit"))
OUTPUT_DIR = os.environ.get("CONDUIT_OUTPUT_DIR", str(REPO / "demo-output"))
# Watched: the triggerer announces each DLQ write while the pipeline runs (also one started from the CLI),
# and the hourly DAG's operator then leaves the announcing to it.
# airflow_api_conn_id: exactly once across triggerer restarts where the connection exists (docker-compose.yaml
# sets it); without it, a write may be announced twice there, never lost.
ORDERS_DLQ = dlq_asset("orders", state_dir=STATE_DIR, watch=True, airflow_api_conn_id="conduit_airflow_api")
ORDERS = {
    "pipeline_file": "pipelines/orders.yaml",
    "pipeline_id": "orders",
    "state_dir": STATE_DIR,
    "env_vars": {"CONDUIT_OUTPUT_DIR": OUTPUT_DIR, "CONDUIT_ORDERS_RECORDS": "1000"},
}

with DAG(
    dag_id="conduit_orders_dlq_review",
    schedule=[ORDERS_DLQ],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["conduit", "example", "dlq"],
    doc_md=__doc__,
) as dag:
    ConduitDLQReviewOperator(
        task_id="review",
        **ORDERS,
        sample_size=10,
        default_action="leave",
        response_timeout=timedelta(hours=4),
    )

with DAG(
    dag_id="conduit_orders_degraded_review",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["conduit", "example", "dlq"],
    doc_md=__doc__,
) as degraded_dag:
    review_poison = ConduitDLQReviewOperator(
        task_id="review",
        review="poison",
        **ORDERS,
        default_action="leave",
        response_timeout=timedelta(hours=4),
    )

    @task.short_circuit
    def resume_wanted(outcome: dict[str, Any]) -> bool:
        """Only an answer that lets the pipeline go on runs it again."""
        return bool(outcome.get("resume"))

    resume = ConduitPipelineOperator(task_id="resume", **ORDERS, emit_dlq_asset=True)

    resume_wanted(review_poison.output) >> resume
