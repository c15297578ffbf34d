"""Snapshot and long-polling pages of the ``builtin:postgres`` source: key ranges of a table, read in
key order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from airflow_conduit.engine.connectors.postgres.records import row_record
from airflow_conduit.engine.connectors.postgres.tables import Table, ident


def page_end(
    conn: Any, table: Table, column: str, after: str | None, limit: int, upto: str | None = None
) -> tuple[str | None, int]:
    """The last ``column`` value of the next page of at most ``limit`` rows after ``after`` (and at or
    below ``upto``), with the page's row count; ``(None, 0)`` when there is none."""
    col, cast = ident(column), table.type_of(column)
    where, params = [], []
    if after is not None:
        where.append(f"{col} > CAST(%s AS {cast})")
        params.append(after)
    if upto is not None:
        where.append(f"{col} <= CAST(%s AS {cast})")
        params.append(upto)
    condition = f"WHERE {' AND '.join(where)}" if where else f"WHERE {col} IS NOT NULL"
    row = conn.execute(
        f"SELECT v::text, n FROM (SELECT {col} AS v, count(*) OVER () AS n FROM "
        f"(SELECT {col} FROM {table.qualified} {condition} ORDER BY {col} LIMIT %s) page) s "
        "ORDER BY v DESC LIMIT 1",
        (*params, limit),
    ).fetchone()
    return (row[0], int(row[1])) if row else (None, 0)


def max_of(conn: Any, table: Table, column: str) -> str | None:
    row = conn.execute(f"SELECT max({ident(column)})::text FROM {table.qualified}").fetchone()
    return row[0] if row else None


def read_range(
    conn: Any,
    table: Table,
    operation: str,
    after: str | None,
    upto: str | None,
    prefix: str,
    fetch_size: int = 5000,
) -> Iterator[tuple]:
    """Rows with ``after < order <= upto`` in order, through a server-side cursor (bounded memory)."""
    col, cast = ident(table.order), table.type_of(table.order)
    where, params = [f"{col} <= CAST(%s AS {cast})"], [upto]
    if after is not None:
        where.append(f"{col} > CAST(%s AS {cast})")
        params.append(after)
    names = [name for name, _ in table.columns]
    order_index = names.index(table.order)
    key_index = [names.index(k) for k in table.key]
    with conn.transaction(), conn.cursor(name="conduit_source_page") as cursor:
        cursor.itersize = max(1, fetch_size)
        cursor.execute(
            f"SELECT {table.select_list()} FROM {table.qualified} WHERE {' AND '.join(where)} ORDER BY {col}",
            params,
        )
        for values in cursor:
            # The ordering value need not be unique (long polling): the key makes the position so.
            position = f"{prefix}:{table.name}:{values[order_index]}"
            if prefix == "poll" and table.key != (table.order,):
                position += ":" + ",".join(str(values[i]) for i in key_index)
            yield row_record(table, values, operation, position)
