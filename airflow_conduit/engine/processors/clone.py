"""``clone``: each record and ``count`` copies of it, ``clone.index`` 0 (the original) to ``count``."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings.fanout import CloneSettings
from airflow_conduit.engine.processors._expr import active_sql
from airflow_conduit.engine.processors._fanout import explode_pieces


def apply(records: DataFrame, proc: ProcessorConfig[CloneSettings]) -> DataFrame:
    pieces = f"CASE WHEN {active_sql(proc)} THEN sequence(0, {proc.settings.count}) END"
    return explode_pieces(records, pieces, "clone.index", {})
