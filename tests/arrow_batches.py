"""Arrow batches in the layout ``custom.python``'s mapper gets (``ARROW_SCHEMA``), for tests without
Spark."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from airflow_conduit.engine.processors.custom_python import arrow_schema

SCHEMA = arrow_schema()


def arrow_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """``rows`` (columns by name) as one batch; columns a row leaves out are null, except an open,
    active state."""
    full = [{f.name: None for f in SCHEMA} | {"_state": "open", "_active": True} | row for row in rows]
    return pa.RecordBatch.from_pylist(full, schema=SCHEMA)
