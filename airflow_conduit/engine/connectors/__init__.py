"""Source and destination connectors, one module each, looked up by Conduit plugin name.

A destination writes in two phases: ``stage`` does the work without making it visible, and the returned
object's ``publish`` makes it visible (or ``discard`` drops it), so the engine can refuse a micro-batch
after it was computed without anything of it reaching the destination.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.engine.connectors import file, generator, log
from airflow_conduit.engine.connectors._stream import Delivery, SourceContext


class Staged(Protocol):
    def publish(self) -> Any: ...

    def discard(self) -> None: ...


ReadStream = Callable[[SparkSession, dict[str, Any], SourceContext], DataFrame]
Stage = Callable[[DataFrame, dict[str, Any], Delivery], Staged]

SOURCES: dict[str, ReadStream] = {
    "builtin:generator": generator.read_stream,
    "builtin:file": file.read_stream,
}

DESTINATIONS: dict[str, Stage] = {
    "builtin:file": file.stage,
    "builtin:log": log.stage,
}

__all__ = ["DESTINATIONS", "SOURCES", "Delivery", "SourceContext", "Staged"]
