"""Where records enter the engine: each source's stream, and the records of one micro-batch.

Spark runs the streaming query's own plan (the sources up to the fan-in) apart from the plan that
``foreachBatch`` builds over its output, and hands that second plan the rows one by one: every column the
stream computes is written out per record and read back. So the stream carries only what the sources
yield and ``_src``; parsing, the standard metadata, the internal columns and the sources' processors are
part of the micro-batch's plan, where Spark fuses them with the pipeline's processors and the writes and
computes only what is used. (Measured on the throughput benchmark: building the records in the stream
cost about 0.6 s more per million records.)

A source whose plugin can read a batch from its offsets (``builtin:file``) is read that way instead
(:func:`read_sources`): Spark's stream only decides the batch's offsets, and the engine reads the
records between them in the micro-batch's own plan.
"""

from __future__ import annotations

import dataclasses
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.config.fieldref import sql_string, sql_string_map
from airflow_conduit.config.model import ConnectorConfig, PipelineConfig, ProcessorConfig
from airflow_conduit.config.settings import UNSTORED_MAX_RECORDS_PER_BATCH
from airflow_conduit.config.settings.sdk import SourceSdkSettings
from airflow_conduit.engine.connectors import SourceContext, plugins
from airflow_conduit.engine.delivery import BatchContext
from airflow_conduit.engine.frames import select_sql
from airflow_conduit.engine.processors import apply_all
from airflow_conduit.offsets import OffsetLog
from airflow_conduit.record import (
    DATA_FIELDS,
    META_READ_AT,
    META_SOURCE_CONNECTOR,
    SOURCE_DEFAULTS,
    SOURCE_TYPES,
    STATE_OPEN,
    try_parse_json_sql,
)
from airflow_conduit.state import PipelineState


def _source_column(name: str, given: set[str]) -> str:
    """A source column as the source gave it, or its default (NULL unless the record model has one)."""
    if name in given:
        return name
    default = sql_string(SOURCE_DEFAULTS[name]) if name in SOURCE_DEFAULTS else "NULL"
    return f"CAST({default} AS {SOURCE_TYPES[name]}) AS {name}"


def admitted_sources(pipeline: PipelineConfig, *, nothing_stored: bool) -> tuple[ConnectorConfig, ...]:
    """The sources as their streams read them. A source whose records per micro-batch the pipeline file
    leaves to the engine admits :data:`UNSTORED_MAX_RECORDS_PER_BATCH` when nothing of a batch is stored
    (``nothing_stored``: memory does not grow with the batch) and every destination writes in bulk (a
    batch stays a few seconds long); otherwise its settings' default."""
    if not (nothing_stored and all(d.spec.bulk_writes for d in pipeline.destinations)):
        return pipeline.sources
    return tuple(
        dataclasses.replace(
            source,
            settings=source.settings.model_copy(
                update={"max_records_per_batch": UNSTORED_MAX_RECORDS_PER_BATCH}
            ),
        )
        if isinstance(source.settings, SourceSdkSettings) and not source.settings.batch_limit_given
        else source
        for source in pipeline.sources
    )


def _context(spark: SparkSession, source: ConnectorConfig, state: PipelineState) -> SourceContext:
    return SourceContext(
        source.id, source.node_id, str(state.stop_file), spark.sparkContext.defaultParallelism
    )


def _shaped(raw: DataFrame, index: int, source: ConnectorConfig, state: PipelineState) -> DataFrame:
    """The columns of :data:`~airflow_conduit.record.SOURCE_SCHEMA` (a column the source does not yield
    holds its default) and ``_src``, without the records ``airflow-conduit ack`` acknowledged."""
    acked = state.acked_positions(source.id)
    if acked:
        # Poison records acknowledged by `airflow-conduit ack`: skipped, never processed nor written;
        # the batch commits past them, so the source counts them as acked.
        listed = ", ".join(f"X'{p.hex()}'" for p in sorted(acked))
        raw = raw.filter(f"coalesce(NOT (position IN ({listed})), true)")
    given = set(raw.columns)
    return select_sql(
        raw, [*(_source_column(name, given) for name in SOURCE_TYPES), f"CAST({index} AS INT) AS _src"]
    )


def source_stream(
    spark: SparkSession, index: int, source: ConnectorConfig, state: PipelineState
) -> DataFrame:
    """One source's stream: :func:`_shaped`, ``_src`` being the source's index in the pipeline."""
    return _shaped(plugins.read_stream(spark, source, _context(spark, source, state)), index, source, state)


def read_sources(
    batch: DataFrame,
    sources: tuple[ConnectorConfig, ...],
    state: PipelineState,
    batch_id: int,
    read_at_ns: int,
) -> tuple[DataFrame, dict[str, int]]:
    """The micro-batch's rows (the fan-in of :func:`source_stream`): a source the engine reads itself
    (:func:`~airflow_conduit.engine.connectors.plugins.reads_batches`) is read from the batch's offsets
    in Spark's offset log, with the standard metadata already in its records' metadata (see
    :func:`batch_records`); the others' rows are the stream's. Spark never computes the stream's rows
    of the former: nothing reads them. Also the records each of the former holds, by source node (Spark's
    progress does not count them)."""
    direct = [plugins.reads_batches(s) for s in sources]
    if not any(direct):
        return batch, {}
    spark = batch.sparkSession
    contexts = [_context(spark, s, state) for s in sources]
    log = OffsetLog.of(state)

    def initial(i: int) -> Any:
        if not direct[i]:
            return None  # its rows are the stream's: no need to ask it (a connection, perhaps)
        reader = plugins.stream_reader(sources[i], contexts[i])
        assert reader is not None, "a source read from its offsets has a stream reader"
        return reader.initialOffset()

    ranges = log.ranges(batch_id, len(sources), initial)
    parts = [
        _shaped(
            plugins.read_batch(spark, source, contexts[i], *ranges[i], _standard_entries(source, read_at_ns)),
            i,
            source,
            state,
        )
        if direct[i]
        else batch.filter(f"_src = {i}")
        for i, source in enumerate(sources)
    ]
    read = {s.node_id: plugins.records_between(s, *ranges[i]) for i, s in enumerate(sources) if direct[i]}
    return reduce(DataFrame.unionByName, parts), read


def _standard_entries(source: ConnectorConfig, read_at_ns: int) -> dict[str, str]:
    """The metadata the engine adds to every record of ``source``: when it was read and which source
    read it."""
    return {META_READ_AT: str(read_at_ns), META_SOURCE_CONNECTOR: source.node_id}


def _standard_metadata(pipeline: PipelineConfig, read_at_ns: int) -> str:
    """:func:`_standard_entries` as a map per source: a constant, so Spark builds each map once, not
    once per record. NULL for a source read from its offsets, whose records have them already."""
    maps = [
        "CAST(NULL AS map<string,string>)"
        if plugins.reads_batches(source)
        else sql_string_map(_standard_entries(source, read_at_ns))
        for source in pipeline.sources
    ]
    if len(maps) == 1:
        return maps[0]
    return "CASE _src " + " ".join(f"WHEN {i} THEN {m}" for i, m in enumerate(maps)) + " END"


def _scoped(processors: tuple[ProcessorConfig, ...], index: int) -> list[ProcessorConfig]:
    """A source's processors, acting on that source's records only."""
    scoped = []
    for proc in processors:
        condition = f"_src = {index}" + (f" AND ({proc.condition})" if proc.condition else "")
        scoped.append(dataclasses.replace(proc, condition=condition))
    return scoped


def batch_records(
    batch: DataFrame, pipeline: PipelineConfig, context: BatchContext, read_at_ns: int
) -> DataFrame:
    """The records of a micro-batch (the fan-in of :func:`source_stream`), numbered in source order
    (``_seq``), after the sources' processors and then the pipeline's.

    :param read_at_ns: ``opencdc.readAt``: the micro-batch's time from Spark's offset log, so a replayed
        batch carries the same value.
    """
    standard = _standard_metadata(pipeline, read_at_ns)
    if all(plugins.reads_batches(s) for s in pipeline.sources):
        metadata = "metadata"  # the sources' own reads added the standard entries
    else:
        metadata = (
            f"CASE WHEN {standard} IS NULL THEN metadata WHEN metadata IS NULL THEN {standard} "
            f"ELSE map_concat(metadata, {standard}) END"
        )
    columns = ["position", "operation", f"{metadata} AS metadata"]
    for name in DATA_FIELDS:
        columns += [f"{try_parse_json_sql(f'{name}_json')} AS {name}", f"{name}_raw"]
    records = select_sql(
        batch,
        [
            *columns,
            "_src",
            "monotonically_increasing_id() AS _seq",  # (source, partition, row): source order
            f"'{STATE_OPEN}' AS _state",
            "CAST(NULL AS STRING) AS _error",
            "CAST(NULL AS STRING) AS _node",
            "CAST(array() AS array<int>) AS _piece",
        ],
    )
    processors = [p for i, s in enumerate(pipeline.sources) for p in _scoped(s.processors, i)]
    return apply_all(records, [*processors, *pipeline.processors], context)
