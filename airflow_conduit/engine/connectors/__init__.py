"""Source and destination connectors, one module each, looked up by Conduit plugin name.

A destination writes in two phases: ``stage`` does the work without making it visible, and the returned
object's ``publish`` makes it visible (or ``discard`` drops it), so the engine can refuse a micro-batch
after it was computed without anything of it reaching the destination.

Exactly once: a destination that can keep a delivery marker with its data (the file destination by an
atomic rename, Postgres in the same transaction as the rows) implements ``delivered``; the engine asks it
before staging a batch, and a destination that already holds the batch's delivery hash is acknowledged
without writing. ``publish`` stores the marker together with the data.

The records a destination stages are :data:`~airflow_conduit.record.RECORD_COLUMNS` plus ``_seq`` (a
bigint, unique in the batch, increasing in source order). A destination that writes in bulk and finds
records the target refuses (a constraint violation, a value the column rejects) writes the rest and
lists the refused ones in ``Staged.nacks`` as ``(seq, error)``: the engine sends those to the DLQ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.engine.connectors import file, generator, log, python
from airflow_conduit.engine.connectors._stream import Delivery, SourceContext
from airflow_conduit.engine.connectors.postgres import destination as postgres_destination
from airflow_conduit.engine.connectors.postgres import source as postgres_source


class Staged(Protocol):
    def publish(self) -> Any: ...

    def discard(self) -> None: ...


ReadStream = Callable[[SparkSession, dict[str, Any], SourceContext], DataFrame]
Stage = Callable[[DataFrame, dict[str, Any], Delivery], Staged]
Delivered = Callable[[dict[str, Any], Delivery], bool]


def nacks_of(staged: Staged) -> list[tuple[int, str]]:
    """The records a destination refused while staging, as ``(seq, error)``."""
    return list(getattr(staged, "nacks", None) or [])


def never_delivered(settings: dict[str, Any], delivery: Delivery) -> bool:
    """For destinations that keep no marker (at least once): every replay writes again."""
    return False


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

__all__ = ["DELIVERED", "DESTINATIONS", "SOURCES", "Delivery", "SourceContext", "Staged", "nacks_of"]
