"""Arrow batches in the layout ``custom.python``'s mapper gets (``ARROW_SCHEMA``), for tests without
Spark."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from airflow_conduit.engine.processors.custom_python import arrow_schema

SCHEMA = arrow_schema()


def arrow_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """``rows`` (columns by name) as one batch; columns a row leaves out are null, except an open,
    active state. A row's ``metadata`` as (key, value) pairs, which the batch holds as the engine's
    JSON text of them."""
    full = [{f.name: None for f in SCHEMA} | {"_state": "open", "_active": True} | row for row in rows]
    for row in full:
        if row["metadata"] is not None:
            row["metadata"] = json.dumps(dict(row["metadata"]), separators=(",", ":"))
    return pa.RecordBatch.from_pylist(full, schema=SCHEMA)


def metadata_pairs(text: str | None) -> list[tuple[str, str | None]] | None:
    """A batch's metadata text as (key, value) pairs, in its order."""
    return None if text is None else list(json.loads(text).items())
