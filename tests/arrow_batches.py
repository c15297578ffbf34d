"""Arrow batches in the layout ``custom.python``'s mapper gets (``ARROW_SCHEMA``), for tests without
Spark."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from airflow_conduit.engine.processors.custom_python import ARROW_SCHEMA

_ARROW_TYPES = {
    "binary": pa.binary(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
    "array<int>": pa.list_(pa.int32()),
}
SCHEMA = pa.schema(
    [pa.field(name, _ARROW_TYPES[kind]) for name, kind in (c.split(" ", 1) for c in ARROW_SCHEMA.split(", "))]
)


def arrow_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """``rows`` (columns by name) as one batch; columns a row leaves out are null, except an open,
    active state."""
    full = [{f.name: None for f in SCHEMA} | {"_state": "open", "_active": True} | row for row in rows]
    return pa.RecordBatch.from_pylist(full, schema=SCHEMA)
