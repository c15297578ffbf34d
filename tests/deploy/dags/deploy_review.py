"""Case 7, the DLQ review in the Airflow UI: ``deploy_review`` runs two pipelines of
``pipelines/review.yaml`` that put orders into their DLQs; each DLQ asset event schedules a review DAG
whose ``ConduitDLQReviewOperator`` waits for a person (the test answers through the REST API):
``deploy_review_replay`` is answered "replay", ``deploy_review_ack`` "acknowledge"."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from deploy_common import OUTPUT_DIR, STATE_DIR

from airflow_conduit.assets import dlq_asset
from airflow_conduit.operators.dlq_review import ConduitDLQReviewOperator
from airflow_conduit.operators.pipeline import ConduitPipelineOperator

PIPELINE_FILE = "pipelines/review.yaml"
RECORDS = "10"
PIPELINES = {"replay": "deploy-review-replay", "ack": "deploy-review-ack"}


def env(pipeline_id: str) -> dict[str, str]:
    return {
        "DEPLOY_PIPELINE": pipeline_id,
        "DEPLOY_RECORDS": RECORDS,
        "DEPLOY_OUTPUT": f"{OUTPUT_DIR}/{pipeline_id}",
    }


with DAG("deploy_review", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    for name, pipeline_id in PIPELINES.items():
        ConduitPipelineOperator(
            task_id=name,
            pipeline_file=PIPELINE_FILE,
            pipeline_id=pipeline_id,
            state_dir=STATE_DIR,
            env_vars=env(pipeline_id),
        )

for name, pipeline_id in PIPELINES.items():
    with DAG(
        f"deploy_review_{name}",
        schedule=[dlq_asset(pipeline_id)],
        start_date=pendulum.datetime(2026, 1, 1),
        catchup=False,
    ):
        ConduitDLQReviewOperator(
            task_id="review",
            pipeline_file=PIPELINE_FILE,
            pipeline_id=pipeline_id,
            state_dir=STATE_DIR,
            env_vars=env(pipeline_id),
            sample_size=5,
            response_timeout=timedelta(hours=1),
        )
