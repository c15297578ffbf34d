"""The OpenCDC record as Spark columns, and its JSON form.

A record is one row. Structured data (key, payload before/after) is a ``VARIANT`` object, so processors
run as Spark expressions without per-record Python; raw data is ``BINARY``. Exactly one column of each
pair (``after`` / ``after_raw``) is non-null when the value is set.

Internal columns (dropped before anything leaves the engine):

``_src``    index of the source connector in the pipeline
``_seq``    the record's order in its micro-batch: ``monotonically_increasing_id`` on the union of the
            sources, so it orders by (source, partition, row), which is source order
``_state``  ``open``, ``filtered``, ``nacked``, or ``transient`` / ``fatal`` (stop the pipeline)
``_error``  the nack or stop message
``_node``   the node id that nacked or stopped the record
``_piece``  the record's place among the records one source record became (``split``, ``clone``): empty
            for a record as its source gave it, ``[i]`` for the i-th piece, ``[i, j]`` when a piece was
            split again. Pieces share ``_seq`` (they ack and nack as their source record); ``(_seq,
            _piece)`` orders them. The first piece (all zeros) stands for the source record in counts.
"""

from __future__ import annotations

import base64
import binascii

OPERATIONS = ("create", "update", "delete", "snapshot")

DATA_FIELDS = ("key", "before", "after")
RECORD_COLUMNS = (
    "position",
    "operation",
    "metadata",
    "key",
    "key_raw",
    "before",
    "before_raw",
    "after",
    "after_raw",
)
INTERNAL_COLUMNS = ("_src", "_seq", "_state", "_error", "_node", "_piece")

# What a source connector yields: structured values as JSON text, parsed into VARIANT by the engine.
SOURCE_SCHEMA = (
    "position binary, operation string, metadata map<string,string>, "
    "key_json string, key_raw binary, before_json string, before_raw binary, "
    "after_json string, after_raw binary"
)
SOURCE_TYPES = dict(column.split(" ", 1) for column in SOURCE_SCHEMA.split(", "))
"""Column name -> Spark type of :data:`SOURCE_SCHEMA`."""
SOURCE_DEFAULTS = {"operation": "create"}
"""What a column a source does not yield holds (the others are NULL)."""


def source_schema(*columns: str) -> str:
    """The schema of a source that yields only ``columns`` of :data:`SOURCE_SCHEMA` (fewer columns cost
    less to move from the Python worker into Spark); the engine fills in the others."""
    return ", ".join(f"{name} {SOURCE_TYPES[name]}" for name in columns)


INTERNAL_SCHEMA = "_src int, _seq bigint, _state string, _error string, _node string, _piece array<int>"
# A record inside the engine: structured values as VARIANT.
RECORD_SCHEMA = (
    "position binary, operation string, metadata map<string,string>, key variant, key_raw binary, "
    f"before variant, before_raw binary, after variant, after_raw binary, {INTERNAL_SCHEMA}"
)

HEAD_PIECE_SQL = "coalesce(array_max(_piece), 0) = 0 AND coalesce(array_min(_piece), 0) = 0"
"""True for the one row that stands for its source record (the first piece, or the record unsplit): all
of ``_piece``'s indices are 0. (Not ``NOT exists(_piece, i -> i != 0)``: a lambda has no generated code,
so Spark would split the batch's generated code around it.)"""
ORDER_COLUMNS = ("_seq", "_piece")
"""Source order of the rows of a micro-batch, pieces of one record in their order."""

STATE_OPEN = "open"
STATE_FILTERED = "filtered"
STATE_NACKED = "nacked"
STATE_TRANSIENT = "transient"
STATE_FATAL = "fatal"

META_COLLECTION = "opencdc.collection"
META_READ_AT = "opencdc.readAt"
META_SOURCE_CONNECTOR = "conduit.source.connector.id"
META_DLQ_ERROR = "conduit.dlq.nack.error"
META_DLQ_NODE = "conduit.dlq.nack.node.id"

VARIANT_JSON_FUNCTION = "conduit_variant_json"
"""The engine's SQL function for a ``VARIANT`` as JSON text: the same text as ``to_json``, faster
(:mod:`airflow_conduit.engine.sql_functions`)."""
VARIANT_SET_FUNCTION = "conduit_variant_set"
"""The engine's SQL function that sets one field of a ``VARIANT`` object (:mod:`airflow_conduit.engine.sql_functions`)."""
GO_JSON_FUNCTION = "conduit_go_json"
"""The engine's SQL function for a ``VARIANT`` as a Go template's ``toJson`` (``true``) or ``toRawJson``
(``false``) writes it (:mod:`airflow_conduit.engine.sql_functions`)."""
MAP_JSON_FUNCTION = "conduit_map_json"
"""The engine's SQL function for ``to_json`` of a map of strings: the same text, faster
(:mod:`airflow_conduit.engine.sql_functions`)."""
OPENCDC_LINE_FUNCTION = "conduit_opencdc_line"
"""The engine's SQL function for a record as one OpenCDC JSON line (:func:`opencdc_json_sql`)."""
JSON_MAP_FUNCTION = "conduit_json_map"
"""The engine's SQL function that reads :data:`MAP_JSON_FUNCTION`'s text back into a map of strings
(:mod:`airflow_conduit.engine.sql_functions`)."""
TRY_PARSE_JSON_FUNCTION = "conduit_try_parse_json"
"""The engine's SQL function for ``try_parse_json`` of UTF-8 bytes (a ``BINARY``): the same ``VARIANT``,
faster (:mod:`airflow_conduit.engine.sql_functions`)."""


def position_text(position: bytes | bytearray | str | None) -> str | None:
    """A position as people read it (``airflow-conduit dlq``, ``status``, ``inspect``, the exit payload):
    the bytes as UTF-8 text; a position in OpenCDC JSON form (base64) decoded first, and kept as it is
    when it is not base64 of text."""
    if position is None:
        return None
    if isinstance(position, bytes | bytearray):
        return bytes(position).decode(errors="replace")
    try:
        return base64.b64decode(position, validate=True).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return position


def data_sql(field: str) -> str:
    """A structured-or-raw field as one VARIANT: raw data becomes a base64 string, as in OpenCDC JSON."""
    return f"coalesce({field}, cast(base64({field}_raw) as variant))"


def opencdc_struct_sql() -> str:
    """The record as OpenCDC's ``{position, operation, metadata, key, payload: {before, after}}``."""
    return (
        "named_struct("
        "'position', base64(position), 'operation', operation, 'metadata', metadata, "
        f"'key', {data_sql('key')}, "
        f"'payload', named_struct('before', {data_sql('before')}, 'after', {data_sql('after')}))"
    )


def try_parse_json_sql(text_sql: str) -> str:
    """``try_parse_json`` of a STRING, through the engine's faster function
    (:data:`TRY_PARSE_JSON_FUNCTION`), which reads the string's UTF-8 bytes."""
    return f"{TRY_PARSE_JSON_FUNCTION}(cast({text_sql} AS binary))"


def variant_json_sql(column: str) -> str:
    """A ``VARIANT`` column as JSON text: ``to_json``'s text, through the engine's faster function
    (:data:`VARIANT_JSON_FUNCTION`; a session the engine did not start registers it with
    :func:`airflow_conduit.engine.sql_functions.register_functions`)."""
    return f"{VARIANT_JSON_FUNCTION}({column})"


def record_text_sql() -> list[str]:
    """The record's columns as Python per-record code reads them (``selectExpr``): each data field's
    ``VARIANT`` as ``<field>_json`` text (:func:`variant_json_sql`), the other columns as they are."""
    return [f"{variant_json_sql(c)} AS {c}_json" if c in DATA_FIELDS else c for c in RECORD_COLUMNS]


def opencdc_json_sql() -> str:
    """The record as one line of OpenCDC JSON (nulls kept, so ``before: null`` is explicit): the text
    of ``to_json`` of :func:`opencdc_struct_sql` with ``ignoreNullFields`` off in the engine's session.
    Its base64 is on one line in any session (Spark's default, ``spark.sql.chunkBase64String.enabled``,
    splits it every 76 characters, which a JSON line cannot hold; the engine's session turns it off).

    One function of the engine's (:data:`OPENCDC_LINE_FUNCTION`) writes the whole line into one buffer:
    the data fields as :func:`variant_json_sql` does, the metadata as :data:`MAP_JSON_FUNCTION` does.
    (A ``concat`` of each part's text cost an allocation and a copy per part, a raw field a ``VARIANT``
    of its base64; before it, ``to_json`` of a struct for the head cost a quarter of the record model's
    time.)
    """
    return f"{OPENCDC_LINE_FUNCTION}({', '.join(RECORD_COLUMNS)})"
