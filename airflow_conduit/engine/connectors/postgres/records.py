"""Rows and decoded changes as the ``builtin:postgres`` source's records (``SOURCE_SCHEMA`` rows), and
those as Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice

import pyarrow as pa

from airflow_conduit.engine.connectors.postgres.decoding import Change, Column, columns_json
from airflow_conduit.engine.connectors.postgres.tables import Table
from airflow_conduit.record import META_COLLECTION

META_TABLE = "postgres.table"
ARROW_ROWS = 10_000


def _record(
    table: Table, position: str, operation: str, key: str | None, before: str | None, after: str | None
) -> tuple:
    """A row of SOURCE_SCHEMA: structured values as JSON text, raw columns empty."""
    metadata = {META_COLLECTION: table.name, META_TABLE: table.name}
    return (position.encode(), operation, metadata, key, None, before, None, after, None)


def _key_json(table: Table, columns: dict[str, Column]) -> str | None:
    present = [columns[k] for k in table.key if k in columns and not columns[k].toasted]
    return columns_json(present) if present else None


def row_record(table: Table, values: Sequence[str | None], operation: str, position: str) -> tuple:
    """A row read with :meth:`Table.select_list` as a source record."""
    columns = {
        name: Column(name, type_name, text)
        for (name, type_name), text in zip(table.columns, values, strict=True)
    }
    after = columns_json(list(columns.values()))
    return _record(table, position, operation, _key_json(table, columns), None, after)


def change_record(table: Table, change: Change, position: str) -> tuple | None:
    """A decoded change as a source record; None for changes that make no record (TRUNCATE)."""
    old = {c.name: c for c in change.old or ()}
    before = columns_json(list(old.values())) if old else None
    if change.action == "DELETE":
        return _record(table, position, "delete", _key_json(table, old), before, None)
    if change.action not in ("INSERT", "UPDATE") or change.new is None:
        return None
    # A TOASTed column the update left unchanged is not in the new row; the old row may hold it.
    new = {c.name: (old.get(c.name, c) if c.toasted else c) for c in change.new}
    operation = "create" if change.action == "INSERT" else "update"
    return _record(
        table, position, operation, _key_json(table, new), before, columns_json(list(new.values()))
    )


_ARROW_SCHEMA = pa.schema(
    [
        ("position", pa.binary()),
        ("operation", pa.string()),
        ("metadata", pa.map_(pa.string(), pa.string())),
        ("key_json", pa.string()),
        ("key_raw", pa.binary()),
        ("before_json", pa.string()),
        ("before_raw", pa.binary()),
        ("after_json", pa.string()),
        ("after_raw", pa.binary()),
    ]
)


def arrow_batches(records: Iterator[tuple]) -> Iterator[pa.RecordBatch]:
    """Records as Arrow batches of ARROW_ROWS: Spark takes them without converting row by row."""
    while True:
        chunk = list(islice(records, ARROW_ROWS))
        if not chunk:
            return
        columns = list(zip(*chunk, strict=True))
        arrays = [pa.array(values, field.type) for values, field in zip(columns, _ARROW_SCHEMA, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)
