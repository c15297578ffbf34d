"""The connector plugins by Conduit plugin name: how each source reads, each destination stages a
micro-batch, and whether a destination already holds a delivery."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.engine.connectors import Delivery, SourceContext, Staged, file, generator, log, python
from airflow_conduit.engine.connectors.postgres import destination as postgres_destination
from airflow_conduit.engine.connectors.postgres import source as postgres_source

ReadStream = Callable[[SparkSession, dict[str, Any], SourceContext], DataFrame]
Stage = Callable[[DataFrame, dict[str, Any], Delivery], Staged]
Delivered = Callable[[dict[str, Any], Delivery], bool]


def never_delivered(settings: dict[str, Any], delivery: Delivery) -> bool:
    """For destinations that keep no marker (at least once): every replay writes again."""
    return False


REPLAYS_IDENTICALLY = frozenset({"builtin:file", "builtin:generator"})
"""Sources that yield the same rows, in the same partitions, whenever a batch's offsets are read again
(byte ranges of append-only files; a pure function of seed and index). A Postgres snapshot page read
again may see rows changed since."""

SOURCES: dict[str, ReadStream] = {
    "builtin:generator": generator.read_stream,
    "builtin:file": file.read_stream,
    "builtin:postgres": postgres_source.read_stream,
}

DESTINATIONS: dict[str, Stage] = {
    "builtin:file": file.stage,
    "builtin:log": log.stage,
    "builtin:postgres": postgres_destination.stage,
    "custom.python": python.stage,
}

DELIVERED: dict[str, Delivered] = {
    "builtin:file": file.delivered,
    "builtin:log": never_delivered,  # a log line cannot carry a marker: at least once
    "builtin:postgres": postgres_destination.delivered,
    "custom.python": never_delivered,  # the user's function gets the hash and keeps its own marker
}
"""Per destination plugin: does it already hold a delivery? Destinations without a marker never do."""
