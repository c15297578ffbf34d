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
"""

from __future__ import annotations

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
INTERNAL_COLUMNS = ("_src", "_seq", "_state", "_error", "_node")

# What a source connector yields: structured values as JSON text, parsed into VARIANT by the engine.
SOURCE_SCHEMA = (
    "position binary, operation string, metadata map<string,string>, "
    "key_json string, key_raw binary, before_json string, before_raw binary, "
    "after_json string, after_raw binary"
)

INTERNAL_SCHEMA = "_src int, _seq bigint, _state string, _error string, _node string"
# A record inside the engine: structured values as VARIANT.
RECORD_SCHEMA = (
    "position binary, operation string, metadata map<string,string>, key variant, key_raw binary, "
    f"before variant, before_raw binary, after variant, after_raw binary, {INTERNAL_SCHEMA}"
)

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


def opencdc_json_sql() -> str:
    """The record as one line of OpenCDC JSON (nulls kept, so ``before: null`` is explicit)."""
    return f"to_json({opencdc_struct_sql()}, map('ignoreNullFields', 'false'))"
