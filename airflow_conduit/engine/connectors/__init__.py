"""Source and destination connectors, one module each, looked up by Conduit plugin name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.engine.connectors import file, generator, log
from airflow_conduit.engine.connectors._stream import SourceContext

ReadStream = Callable[[SparkSession, dict[str, Any], SourceContext], DataFrame]
WriteBatch = Callable[[DataFrame, dict[str, Any], int], None]

SOURCES: dict[str, ReadStream] = {
    "builtin:generator": generator.read_stream,
    "builtin:file": file.read_stream,
}

DESTINATIONS: dict[str, WriteBatch] = {
    "builtin:file": file.write_batch,
    "builtin:log": log.write_batch,
}

__all__ = ["DESTINATIONS", "SOURCES", "SourceContext"]
