"""``error``: nack the records (where the condition holds) with ``message``."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import ErrorSettings
from airflow_conduit.engine.processors._expr import apply_changes, sql_str
from airflow_conduit.engine.processors._templates import setting_sql


def apply(records: DataFrame, proc: ProcessorConfig[ErrorSettings]) -> DataFrame:
    # An empty message is Conduit's default; any other is a template (setting_sql: literal, SQL or column).
    message = setting_sql(proc, "message") if proc.settings.message else sql_str("error processor triggered")
    return apply_changes(records, proc, {}, problem="true", problem_message=message)
