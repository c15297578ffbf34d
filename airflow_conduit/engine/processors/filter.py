"""``filter``: drop the records (where the condition holds); a filtered record counts as acked."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import FilterSettings
from airflow_conduit.engine.processors._expr import apply_changes
from airflow_conduit.record import STATE_FILTERED


def apply(records: DataFrame, proc: ProcessorConfig[FilterSettings]) -> DataFrame:
    return apply_changes(records, proc, {"_state": f"'{STATE_FILTERED}'"})
