"""Records to staging rows for the ``builtin:postgres`` destination, and the ``COPY`` of them.

Two layouts, both computed by Spark expressions in the pass that computes the batch:

- **typed**, when the destination names its ``table``: the driver reads the table's columns first, and
  each record becomes ``seq, op, tbl, key, err`` and one text column per table column (``c0``, ``c1``...,
  the field's value as PostgreSQL reads it: a JSON string unquoted, numbers and booleans as text,
  objects and arrays as JSON). PostgreSQL reads that text with the column types' own input functions,
  instead of parsing a ``jsonb`` document per record and taking it apart again;
- **json**, when the table comes from each record's ``opencdc.collection`` and the columns are not known
  before the pass: ``key`` and ``after`` travel as ``jsonb``.

``err`` says why a record cannot be applied (raw payload, no key, a field that is no column...); such
records are nacked. The driver receives the rows as Arrow while Spark computes them (:func:`stream`),
writes them as CSV through ``COPY`` (:func:`csv_rows`) and summarises which tables, operations and fields
the batch holds (:func:`summaries`): no per-record Python anywhere.
"""

from __future__ import annotations

import io
import json
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.config.fieldref import sql_string as sql_text
from airflow_conduit.config.fieldref import variant_path
from airflow_conduit.errors import Code, FatalError
from airflow_conduit.record import META_COLLECTION, variant_json_sql

if TYPE_CHECKING:
    from airflow_conduit.config.settings import PostgresDestinationSettings

_COMMON = ("seq", "op", "tbl", "key", "err")


@dataclass(frozen=True)
class Layout:
    """The staging table's columns; ``columns`` are the target's, in the order of ``c0``, ``c1``...
    (empty: the json layout)."""

    columns: tuple[str, ...] = ()

    @property
    def typed(self) -> bool:
        return bool(self.columns)

    def value_column(self, column: str) -> str:
        """The staging column that holds the target ``column``'s text (typed layout)."""
        return f"c{self.columns.index(column)}"

    @property
    def copied(self) -> tuple[str, ...]:
        if self.typed:
            return _COMMON + tuple(f"c{i}" for i in range(len(self.columns)))
        return (*_COMMON, "after")

    def ddl(self) -> str:
        """The staging table's column definitions."""
        if self.typed:
            values = "".join(f", c{i} text" for i in range(len(self.columns)))
            return f"seq bigint, op text, tbl text, key text, err text{values}"
        return "seq bigint, op text, tbl text, key jsonb, err text, after jsonb"


def _field(name: str) -> str:
    """The ``variant_get`` path of a top-level field, as a SQL literal."""
    return sql_text(variant_path((name,)))


def staging_frame(
    records: DataFrame,
    settings: PostgresDestinationSettings,
    layout: Layout,
    json_columns: Sequence[str] = (),
) -> DataFrame:
    """The records as staging rows (:attr:`Layout.copied`), plus what the summary needs.

    ``json_columns`` (typed layout) are the target's columns that take JSON as it is (json, jsonb,
    arrays, composites): their text is the field's JSON, and a JSON ``null`` is NULL.
    """
    table, key = settings.table, settings.key
    quoted = [c for c in (key, *json_columns) if '"' in c]  # they are read through a JSON path
    if quoted:
        raise FatalError(
            f"postgres destination: column {quoted[0]!r} (the key, or a json/array column) must not "
            "contain '\"'",
            code=Code.INVALID_CONFIG,
        )
    tbl = sql_text(table) if table else f"nullif(metadata[{sql_text(META_COLLECTION)}], '')"
    if "_seq" not in records.columns:  # the engine passes it; a caller without it gets source order
        records = records.withColumn("_seq", F.monotonically_increasing_id())
    rows = records.selectExpr(
        "_seq AS seq",
        "operation",
        f"{tbl} AS tbl",
        "key",
        "key_raw",
        "before",
        "after",
        "after_raw",
        # The payload's fields, to tell which columns a batch sets (and, typed, fields no column takes).
        "try_variant_get(after, '$', 'map<string,variant>') AS fields_map",
    )
    err = _error_sql(key, layout, table)
    applied = "err IS NULL AND operation <> 'delete'"
    if layout.typed:
        # Each column's field as JSON text, read from the payload as a map: one pass over the object.
        # Much cheaper than a variant-to-struct cast (a lookup by name per field) or casting each value
        # to a string. j{i} is NULL when the field is missing, 'null' for a JSON null.
        jsons = [
            f"{variant_json_sql(f'try_element_at(fields_map, {sql_text(c)})')} AS j{i}"
            for i, c in enumerate(layout.columns)
        ]
        rows = rows.selectExpr("*", *jsons)
        has = [f"j{i} IS NOT NULL AS h{i}" for i in range(len(layout.columns))]
        rows = rows.selectExpr("*", *has, f"{_key_sql(key, layout)} AS key_value")
        values = [
            f"CASE WHEN {applied} THEN {_text_sql(c, i, c in json_columns)} END AS c{i}"
            for i, c in enumerate(layout.columns)
        ]
        present = [f"({applied} AND h{i}) AS p{i}" for i in range(len(layout.columns))]
        extra = [*values, *present]
    else:
        rows = rows.selectExpr("*", f"{_key_sql(key, layout)} AS key_value")
        extra = [
            f"CASE WHEN {applied} THEN {variant_json_sql('after')} END AS after",
            f"CASE WHEN {applied} THEN to_json(map_keys(fields_map)) END AS fields",
        ]
    return rows.selectExpr("*", f"{err} AS err").selectExpr(
        "seq",
        "operation AS op",
        "tbl",
        "CASE WHEN err IS NULL THEN key_value END AS key",
        "err",
        *extra,
    )


def _key_sql(key: str, layout: Layout) -> str:
    """The key's value: from ``.Key.<key>``, else ``.Payload.After.<key>``, else ``.Payload.Before.<key>``,
    else a raw ``.Key`` read as UTF-8. Typed: as text, as PostgreSQL reads it; else as JSON."""
    if not key:
        return "CAST(NULL AS STRING)"
    sources = {part: f"variant_get({part}, {_field(key)})" for part in ("key", "after", "before")}
    if not layout.typed:
        return variant_json_sql(
            f"coalesce({', '.join(sources.values())}, cast(cast(key_raw AS STRING) AS VARIANT))"
        )
    texts = {part: f"try_variant_get({value}, '$', 'string')" for part, value in sources.items()}
    if key in layout.columns:  # the payload's field as text is at hand already, and much cheaper
        texts["after"] = _text_sql(key, layout.columns.index(key), False)
    return f"coalesce({texts['key']}, {texts['after']}, {texts['before']}, cast(key_raw AS STRING))"


def _text_sql(column: str, index: int, as_json: bool) -> str:
    """A column's text from its JSON (``j{index}``): a string unquoted (as PostgreSQL's ``->>`` reads
    it), anything else as JSON; a JSON null is NULL."""
    text = f"j{index}"
    if as_json:
        return f"CASE WHEN {text} <> 'null' THEN {text} END"
    return _json_text(text, f"try_element_at(fields_map, {sql_text(column)})")


def _json_text(json: str, variant: str) -> str:
    """The text of a value given as JSON (``json``), as PostgreSQL's ``->>`` reads it: a string
    unquoted, anything else as JSON, a JSON null as NULL.

    A string without escapes is its JSON minus the quotes; one with escapes is read back from
    ``variant`` (rare, and dearer: casting a variant to a string is several times slower than
    ``to_json``).
    """
    unescaped = f"try_variant_get({variant}, '$', 'string')"
    return f"""CASE WHEN {json} = 'null' THEN NULL
        WHEN startswith({json}, '"') THEN
            CASE WHEN contains({json}, '\\\\') THEN {unescaped} ELSE substr({json}, 2, length({json}) - 2) END
        ELSE {json} END"""


def _error_sql(key: str, layout: Layout, table: str) -> str:
    """Why a record cannot be applied, or NULL."""
    if key:
        missing = f"postgres: no value for key column {key} in .Key, .Payload.After or .Payload.Before"
        key_rule = f"WHEN key_value IS NULL THEN {sql_text(missing)}"
    else:
        key_rule = (
            "WHEN operation IN ('update', 'delete') THEN concat('postgres: cannot apply an ', operation, "
            "' without the `key` setting (the column that identifies the row)')"
        )
    unknown_rule = ""
    if layout.typed:
        # More fields than columns it has (h{i}, see staging_frame): only then look for the name.
        known_fields = " + ".join(f"CAST(h{i} AS INT)" for i in range(len(layout.columns)))
        known = ", ".join(sql_text(c) for c in layout.columns)
        unknown = f"array_except(map_keys(fields_map), array({known}))"
        unknown_rule = (
            f"WHEN operation <> 'delete' AND size(fields_map) > {known_fields} THEN concat('postgres: column \"', "
            f"element_at({unknown}, 1), '\" of relation \"', {sql_text(table)}, '\" does not exist')"
        )
    return f"""CASE
        WHEN operation IS NULL OR operation NOT IN ('create', 'update', 'delete', 'snapshot')
            THEN concat('postgres: unknown operation ', coalesce(operation, 'null'))
        WHEN tbl IS NULL
            THEN 'postgres: no target table: set `table` or the record\\'s {META_COLLECTION} metadata'
        WHEN operation <> 'delete' AND after_raw IS NOT NULL
            THEN 'postgres: .Payload.After is raw data and cannot be mapped to columns (decode it with json.decode)'
        WHEN operation <> 'delete' AND (after IS NULL OR is_variant_null(after))
            THEN 'postgres: the record has no .Payload.After to write'
        WHEN operation <> 'delete' AND fields_map IS NULL
            THEN 'postgres: .Payload.After is not an object, so it names no columns'
        {key_rule}
        {unknown_rule}
        END"""


_PARTITION = "_part"


def stream(rows: DataFrame, context: str) -> Generator[pa.RecordBatch, None, None]:
    """The staging rows as Arrow record batches, handed over while Spark still computes the rest of the
    micro-batch, so that the driver's ``COPY`` overlaps with Spark's work.

    Spark sends each partition's batches together, partitions in the order they finish; they are
    yielded in partition order, which is source order (``seq`` numbers the batch by partition). A
    partition that finishes before one in front of it waits; an empty partition never arrives, so the
    ones after it wait for the end.

    One micro-batch of rows must fit Spark's ``spark.driver.maxResultSize`` (1g by default); a batch that
    does not is refused with what to change, as retrying it would fail again.
    """
    try:
        yield from _in_partition_order(_arrow_batches(rows.withColumn(_PARTITION, F.spark_partition_id())))
    except Exception as error:  # Spark's error comes through Py4J; its text names the setting
        if "maxResultSize" not in str(error):
            raise
        raise FatalError(
            f"{context}: the micro-batch is larger than spark.driver.maxResultSize allows the driver to "
            "collect: lower the source's maxRecordsPerBatch, or raise spark.driver.maxResultSize",
            code=Code.DESTINATION_FAILED,
        ) from None


def _arrow_batches(frame: DataFrame) -> Iterator[pa.RecordBatch]:
    """The frame's Arrow batches as Spark serves them (what ``DataFrame.toArrow`` reads, one at a time)."""
    from pyspark.errors.exceptions.captured import unwrap_spark_exception
    from pyspark.sql.pandas.serializers import ArrowCollectSerializer
    from pyspark.util import _load_from_socket

    port, secret, server = frame._jdf.collectAsArrowToPython()
    finished = False
    try:
        with _load_from_socket((port, secret), ArrowCollectSerializer()) as served:
            for item in served:  # the batches, then a list: their partition order
                if isinstance(item, pa.RecordBatch):
                    yield item
        finished = True
    finally:
        try:
            with unwrap_spark_exception():
                server.getResult()  # raises the job's error, if any
        except Exception:
            if finished:
                raise
            # Left early (the caller failed): the socket is closed and Spark's writer fails on it.


def _in_partition_order(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    waiting: dict[int, list[pa.RecordBatch]] = {}
    arriving: int | None = None
    next_partition = 0
    for batch in batches:
        partition = batch.column(_PARTITION)[0].as_py()
        if partition != arriving:  # the partition before it is complete
            arriving = partition
            while next_partition in waiting:
                yield from waiting.pop(next_partition)
                next_partition += 1
        waiting.setdefault(partition, []).append(batch.drop_columns([_PARTITION]))
    for partition in sorted(waiting):
        yield from waiting[partition]


def summaries(applicable: pa.Table, layout: Layout) -> Iterator[tuple[str, str, list[str], int]]:
    """``(tbl, op, field names, rows)`` of the rows to apply (those whose ``err`` is NULL)."""
    if not applicable.num_rows:
        return
    if not layout.typed:
        grouped = applicable.group_by(["tbl", "op", "fields"]).aggregate([("seq", "count")])
        for row in grouped.to_pylist():
            yield row["tbl"], row["op"], json.loads(row["fields"] or "[]"), row["seq_count"]
        return
    present = [(f"p{i}", "any") for i in range(len(layout.columns))]
    for row in applicable.group_by(["tbl", "op"]).aggregate([("seq", "count"), *present]).to_pylist():
        fields = [c for i, c in enumerate(layout.columns) if row[f"p{i}_any"]]
        yield row["tbl"], row["op"], fields, row["seq_count"]


def copy_statement(table: Any, columns: Sequence[str]) -> Any:
    """``COPY table (columns) FROM STDIN`` as CSV; ``table`` is a psycopg SQL object."""
    from psycopg import sql

    return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
        table, sql.SQL(", ").join(sql.Identifier(column) for column in columns)
    )


def csv_rows(rows: pa.Table | pa.RecordBatch, columns: Sequence[str]) -> memoryview:
    """``rows``' ``columns`` as the CSV that :func:`copy_statement` reads.

    Arrow writes it, every non-null value quoted so that an empty string stays distinct from NULL.
    """
    import pyarrow.csv as pa_csv

    buffer = io.BytesIO()
    options = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid")
    pa_csv.write_csv(rows.select(list(columns)), buffer, options)
    return buffer.getbuffer()
