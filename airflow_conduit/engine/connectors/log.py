"""``builtin:log``: each record as one log line, at the configured level: OpenCDC JSON, or the
destination's ``sdk.record.format`` (:mod:`.record_format`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.connectors.record_format import record_lines

if TYPE_CHECKING:
    from airflow_conduit.config.settings import LogDestinationSettings

logger = logging.getLogger("airflow_conduit.destination.log")

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


@dataclass(frozen=True)
class StagedLog:
    """Logging cannot be taken back, so it happens on publish, once the batch is known to be good.

    The lines are computed on stage, into Spark's cache (executor memory, spilling to disk), by an
    ordinary action: the engine counts what a destination received with a Spark ``observe`` on its
    records, and those metrics arrive only with such an action (a ``toLocalIterator`` reports them as
    soon as it is set up, before any record was read: zero). Publish then only reads the cache.
    """

    lines: DataFrame
    level: int
    message: str

    def publish(self) -> None:
        try:
            if not logger.isEnabledFor(self.level):
                return
            # Streamed partition by partition: the driver never holds the whole batch.
            for row in self.lines.toLocalIterator():
                logger.log(self.level, "%s: %s", self.message, row.value)
        finally:
            self.lines.unpersist()

    def discard(self) -> None:
        """Nothing was written."""
        self.lines.unpersist()


def stage(records: DataFrame, settings: LogDestinationSettings, delivery: Delivery) -> StagedLog:
    level = LEVELS[settings.level]
    lines = record_lines(records, settings.output_format).persist()
    lines.write.format("noop").mode("overwrite").save()
    return StagedLog(lines, level, settings.message or f"{delivery.pipeline_id}:{delivery.destination_id}")
