"""The engine's side of the plugin registry: a connector's functions, from the module its spec names.

A plugin's module is imported when the engine first calls it, not with this package: Spark's Python
workers import a source's module (and so this package) at every query start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.config.model import ConnectorConfig
from airflow_conduit.config.registry import spec_of
from airflow_conduit.config.spec import PluginSettings
from airflow_conduit.engine.connectors import Delivery, LagReader, SourceContext, Staged


def read_stream(spark: SparkSession, source: ConnectorConfig, ctx: SourceContext) -> DataFrame:
    """The source's stream, as its plugin reads it."""
    read = spec_of(source.plugin, "source").implementation().read_stream
    frame: DataFrame = read(spark, source.settings, ctx)
    return frame


def reads_batches(source: ConnectorConfig) -> bool:
    """Whether the engine reads the source's micro-batches itself, from their offsets
    (:func:`read_batch`), rather than through the rows of Spark's stream."""
    return hasattr(spec_of(source.plugin, "source").implementation(), "read_batch")


def read_batch(
    spark: SparkSession,
    source: ConnectorConfig,
    ctx: SourceContext,
    start: Any,
    end: Any,
    metadata: Mapping[str, str],
) -> DataFrame:
    """The source's records between two of its stream's offsets (see :func:`reads_batches`), each
    record's metadata ending with the entries of ``metadata``."""
    implementation = spec_of(source.plugin, "source").implementation()
    frame: DataFrame = implementation.read_batch(spark, source.settings, ctx, start, end, metadata)
    return frame


def records_between(source: ConnectorConfig, start: Any, end: Any) -> int:
    """How many records :func:`read_batch` reads between two offsets (before ``airflow-conduit ack``
    skips any)."""
    return int(spec_of(source.plugin, "source").implementation().records_between(start, end))


def stream_reader(source: ConnectorConfig, ctx: SourceContext) -> Any | None:
    """The source's Spark stream reader, built as Spark builds it, for use in plain Python; ``None``
    when the plugin cannot be read that way (:attr:`~airflow_conduit.config.spec.PluginSpec.inspectable`)."""
    spec = spec_of(source.plugin, "source")
    return spec.implementation().stream_reader(source.settings, ctx) if spec.inspectable else None


def delivered(plugin: str, settings: PluginSettings, delivery: Delivery) -> bool:
    """Whether the destination already holds ``delivery``; never for one that keeps no marker (at least
    once: every replay writes again)."""
    spec = spec_of(plugin, "destination")
    return spec.delivery_marker and bool(spec.implementation().delivered(settings, delivery))


def stage(plugin: str, records: DataFrame, settings: PluginSettings, delivery: Delivery) -> Staged:
    """The destination's write of ``records``, staged: invisible until published."""
    staged: Staged = spec_of(plugin, "destination").implementation().stage(records, settings, delivery)
    return staged


def lag_reader(source: ConnectorConfig, ctx: SourceContext) -> LagReader | None:
    """What tells how far the source is behind, at the end of each batch; ``None`` for a source that
    cannot say it cheaply (its module has no ``lag_reader``). ``ctx`` names the source's node, from
    which some sources derive the names they read under (a NATS durable, a Redis consumer group)."""
    make = getattr(spec_of(source.plugin, "source").implementation(), "lag_reader", None)
    return make(source.settings, ctx) if make is not None else None
