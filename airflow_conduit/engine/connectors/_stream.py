"""What every Python streaming source shares: its options, the stop request, admission control."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.record import SOURCE_SCHEMA


@dataclass(frozen=True)
class SourceContext:
    """What the engine tells a source about the run it is part of."""

    connector_id: str
    node_id: str
    stop_file: str
    """While this file exists a graceful stop is under way: report no new data."""
    parallelism: int = 2
    """Spark's default parallelism: how many pieces a source may cut a micro-batch into."""


@dataclass(frozen=True)
class Delivery:
    """Which delivery a destination write belongs to."""

    pipeline_id: str
    destination_id: str
    batch_id: int
    generation: str
    """Names the checkpoint (its creation time): batch ids restart with a new checkpoint."""
    hash: str = ""
    """The delivery hash: pipeline id, destination id and the batch's source offsets from Spark's offset
    log, hashed (:mod:`airflow_conduit.engine.delivery`). The same on every replay of the batch: a
    destination that stores it with its data can tell that it already holds a replayed batch."""
    nack_limit: int | None = None
    """The most records this write may nack: one more stops the pipeline whatever the rest of the batch
    holds (a DLQ window with threshold 0 takes no nack). A destination that searches for the records it
    refuses may stop there. None: no such limit."""


def source_options(settings: dict[str, Any], ctx: SourceContext) -> dict[str, str]:
    """Python data sources get string options only: pass the settings and context as one JSON value."""
    conf = {
        "settings": dict(settings),
        "stop_file": ctx.stop_file,
        "node": ctx.node_id,
        "parallelism": ctx.parallelism,
    }
    return {"conduit": json.dumps(conf)}


@dataclass(frozen=True)
class SourceOptions:
    """What a stream reader gets back from :func:`source_options` on the Python worker."""

    settings: dict[str, Any]
    stop_file: str
    parallelism: int


def parse_options(options: dict[str, str]) -> SourceOptions:
    conf = json.loads(options["conduit"])
    return SourceOptions(conf["settings"], conf["stop_file"], int(conf["parallelism"]))


def stop_requested(stop_file: str) -> bool:
    return bool(stop_file) and os.path.exists(stop_file)


def read_python_source(
    spark: SparkSession,
    source_cls: type,
    settings: dict[str, Any],
    ctx: SourceContext,
    schema: str = SOURCE_SCHEMA,
) -> DataFrame:
    spark.dataSource.register(source_cls)
    reader = spark.readStream.format(source_cls.name()).schema(schema)
    return reader.options(**source_options(settings, ctx)).load()
