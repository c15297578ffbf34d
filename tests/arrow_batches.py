"""Arrow batches in the layout ``custom.python``'s mapper gets (``ARROW_SCHEMA``), and what the engine
reads back from the batches it yields, for tests without Spark."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from airflow_conduit.engine.processors.custom_python import KEPT_BITS, arrow_schema
from airflow_conduit.record import INTERNAL_COLUMNS as STATE_COLUMNS  # the mapper sees only _seq of them

SCHEMA = arrow_schema()


def full_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with every column of the batch and of the record's state; columns a row leaves out are
    null, except an open, active state. A row's ``metadata`` as (key, value) pairs become the engine's
    JSON text of them."""
    full = [
        {f.name: None for f in SCHEMA}
        | dict.fromkeys(STATE_COLUMNS)
        | {"_state": "open", "_active": True}
        | row
        for row in rows
    ]
    for row in full:
        if row["metadata"] is not None and not isinstance(row["metadata"], str):
            row["metadata"] = json.dumps(dict(row["metadata"]), separators=(",", ":"))
    return full


def arrow_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """``rows`` (columns by name, as :func:`full_rows` fills them) as one batch."""
    return pa.RecordBatch.from_pylist(full_rows(rows), schema=SCHEMA)


def resolved(output: pa.RecordBatch, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the engine reads back from a mapper's ``output`` for the given ``rows``: a field the mapper
    kept as it came (a bit of ``_kept``) from the row, the rest from the output; the state from the
    output where the mapper marked the record, else from the row."""
    records = []
    for out, given in zip(output.to_pylist(), full_rows(rows), strict=True):
        record = {name: out[name] for name in SCHEMA.names if name not in ("_active", "_seq")}
        for field, bit in KEPT_BITS.items():
            if out["_kept"] & bit:
                name = field if field in ("position", "operation", "metadata") else f"{field}_json"
                record[name] = given[name]
        marked = out["_state"] is not None
        record |= {name: given[name] for name in STATE_COLUMNS}
        if marked:
            record |= {name: out[name] for name in ("_state", "_error", "_node")}
        records.append(record)
    return records


def metadata_pairs(text: str | None) -> list[tuple[str, str | None]] | None:
    """A batch's metadata text as (key, value) pairs, in its order."""
    return None if text is None else list(json.loads(text).items())
