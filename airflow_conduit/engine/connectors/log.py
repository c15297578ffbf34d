"""``builtin:log``: each record as one log line of OpenCDC JSON, at the configured level."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.record import opencdc_json_sql

logger = logging.getLogger("airflow_conduit.destination.log")

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


def write_batch(records: DataFrame, settings: dict[str, Any], batch_id: int) -> None:
    level = LEVELS[str(settings.get("level", "info")).lower()]
    if not logger.isEnabledFor(level):
        return
    message = settings.get("message") or "record"
    # Streamed partition by partition: the driver never holds the whole batch.
    for row in records.selectExpr(f"{opencdc_json_sql()} AS value").toLocalIterator():
        logger.log(level, "%s: %s", message, row.value)
