"""The operator that runs a pipeline file on Spark, and Airflow's retries with Conduit's rules."""

from __future__ import annotations

from airflow_conduit.operators.pipeline import ConduitPipelineOperator
from airflow_conduit.operators.retry_policy import ConduitRetryPolicy

__all__ = ["ConduitPipelineOperator", "ConduitRetryPolicy"]
