"""What every Python streaming source shares: its options, the stop request, admission control."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource

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


C = TypeVar("C")


def source_options(config: Any, ctx: SourceContext) -> dict[str, str]:
    """Python data sources get string options only: pass the reader's config and the context as one JSON
    value. ``config`` is the source's own frozen dataclass of JSON values, built on the driver from its
    typed settings: the stream reader runs on a Python worker, which must not import the config layer
    (pydantic) at every query start."""
    conf = {
        "config": dataclasses.asdict(config),
        "stop_file": ctx.stop_file,
        "node": ctx.node_id,
        "parallelism": ctx.parallelism,
    }
    return {"conduit": json.dumps(conf)}


@dataclass(frozen=True)
class SourceOptions(Generic[C]):
    """What a stream reader gets back from :func:`source_options` on the Python worker."""

    config: C
    stop_file: str
    parallelism: int


def _tuples(value: Any) -> Any:
    """JSON arrays back into the tuples a frozen config holds."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def parse_options(options: dict[str, str], config_type: type[C]) -> SourceOptions[C]:
    conf = json.loads(options["conduit"])
    config = config_type(**{name: _tuples(value) for name, value in conf["config"].items()})
    return SourceOptions(config, conf["stop_file"], int(conf["parallelism"]))


def stop_requested(stop_file: str) -> bool:
    return bool(stop_file) and os.path.exists(stop_file)


def read_python_source(
    spark: SparkSession,
    source_cls: type[DataSource],
    config: Any,
    ctx: SourceContext,
    schema: str = SOURCE_SCHEMA,
) -> DataFrame:
    """The stream of a Python data source, its reader configured with ``config`` (see
    :func:`source_options`)."""
    spark.dataSource.register(source_cls)
    reader = spark.readStream.format(source_cls.name()).schema(schema)
    return reader.options(**source_options(config, ctx)).load()
