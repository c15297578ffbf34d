"""``builtin:postgres`` destination: each micro-batch applied to PostgreSQL exactly once.

Protocol, per batch and destination:

1. The driver opens ONE transaction and locks this destination's row in ``_conduit_deliveries``; a batch
   whose delivery hash the row already holds is not computed at all.
2. The executors turn each record into one staging row in the same Spark pass that computes the batch
   (:mod:`.staging`): with a fixed ``table``, one text column per table column (read before the pass),
   else ``key`` and ``after`` as ``jsonb``; ``err`` says why a record cannot be applied (raw payload, a
   field that is no column...); such records are nacked. The driver receives the rows as Arrow, one
   partition after another in source order, while Spark computes the rest, and ``COPY``-s them as they
   come:
3. inserts into a fixed ``table`` (only scalar and json columns) straight into it, under a savepoint;
   so are upserts while every key is new, when the key has a unique index (see :func:`_write`).
   Anything else, or a batch that this ``COPY`` cannot take (PostgreSQL refuses a row, a later part of
   the batch sets another column...), goes through a temporary staging table (``ON COMMIT DROP``) and
   is applied set-wise (:mod:`.setwise`): per key the last operation of the batch wins (deletes with
   ``DELETE ... USING``, creates/updates/snapshots as ``INSERT ... ON CONFLICT (key) DO UPDATE``);
   without ``key`` plain inserts in source order.
4. A data error in the set-wise apply (SQLSTATE class 22/23, e.g. a CHECK or NOT NULL violation) rolls
   back to a savepoint and applies the batch again in halves of its seq range, each under its own
   savepoint, down to single records (Transporter's resume phase, bisected, each half found through an
   index on the staging table's ``seq``): the records PostgreSQL refuses come back as ``nacks`` for the
   DLQ, everything else is applied in source order. When the DLQ window takes no nack (Conduit's
   default), the first refused record stops the pipeline, so the search stops there.
5. The same transaction stores the batch's delivery hash in the marker row. It stays open: ``publish``
   commits it, ``discard`` rolls it back.

Every row travels through the driver (one ``COPY`` stream in the marker's transaction): a micro-batch is
bounded by ``maxRecordsPerBatch``, so that costs the driver one batch of text, not the backlog.

Why exactly once: the rows and the marker commit in the same transaction, so PostgreSQL holds a batch's
data if and only if it holds its delivery hash. A batch replayed after a crash (same offsets, same hash)
finds its hash through :func:`delivered` and is acknowledged without writing; a crash before the commit
leaves neither data nor marker, and the replay writes it. The marker row lock serialises two runs of the
same pipeline that race for one batch. The staging table is temporary, so a crash leaves none
behind.

Conduit semantics and decisions: ``create``/``snapshot`` insert (upsert when ``key`` is set), ``update``
upserts on ``key``, ``delete`` deletes by ``key``. The key value comes from ``.Key.<key>``, else
``.Payload.After.<key>``, else ``.Payload.Before.<key>``, else a raw ``.Key`` read as UTF-8 text. Without
``key``, updates and deletes cannot find their row: they are nacked (not turned into inserts, which would
duplicate rows). Columns are the fields of the structured ``.Payload.After``; a field that is no column of
the table nacks the record, a column that no record of the batch sets keeps its default, and a column set
by some records of the batch but missing from a record is written as NULL for it. Raw payloads cannot be
mapped to columns and are nacked (decode them first with ``json.decode``).

Errors: psycopg errors go through :func:`~airflow_conduit.engine.connectors.postgres._common.classify`
(server unreachable: transient; authentication, missing table, missing privileges: fatal, saying what
to fix). Messages never contain the password.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.connectors.postgres._common import (
    classified,
    connect,
    is_data_error,
    redact,
    safe_url,
    sqlstate,
)
from airflow_conduit.engine.connectors.postgres.setwise import (
    Target,
    apply_batch,
    read_target,
    summarise,
    table_ident,
)
from airflow_conduit.engine.connectors.postgres.staging import (
    Layout,
    copy_statement,
    csv_rows,
    staging_frame,
    stream,
)

if TYPE_CHECKING:
    from airflow_conduit.config.settings import PostgresDestinationSettings

logger = logging.getLogger("airflow_conduit.destination.postgres")

MARKER_TABLE = "_conduit_deliveries"
STAGING_TABLE = "_conduit_stage"
"""The batch's staging table: temporary, so one name serves every session."""
# How a batch was written, as the log says it.
COPIED = "copied into the table"
APPLIED = "applied from the staging table"
NOTHING = "nothing to write"

_MARKER_DDL = f"""CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (
    pipeline_id text NOT NULL,
    destination_id text NOT NULL,
    delivery_hash text NOT NULL,
    batch_id bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline_id, destination_id))"""


@dataclass
class StagedPostgres:
    """A batch applied inside an open transaction; :meth:`publish` commits data and marker together."""

    conn: Any
    url: str
    nacks: list[tuple[int, str]] = field(default_factory=list)
    applied: int = 0

    def publish(self) -> None:
        try:
            with classified(self.url, f"postgres destination: commit on {safe_url(self.url)}"):
                self.conn.commit()
        finally:
            self.conn.close()

    def discard(self) -> None:
        """Roll back; best effort, as it runs while another error is on its way out."""
        try:
            self.conn.rollback()
        except Exception as error:  # the server may be gone: the transaction dies with the connection
            logger.warning("postgres destination: rollback failed: %s", redact(str(error), self.url))
        finally:
            self.conn.close()


def _prepare(conn: Any, table: str, key: str) -> tuple[Layout, Target | None]:
    """The marker table, and with a fixed ``table`` its columns: the staging rows are typed by them
    (:mod:`.staging`). Outside the batch's transaction, so that the DDL holds no lock while it runs."""
    conn.autocommit = True
    conn.execute(_MARKER_DDL)
    target = read_target(conn.cursor(), table, key) if table else None
    conn.autocommit = False
    return (Layout(target.columns) if target else Layout()), target


def _lock_marker(cur: Any, delivery: Delivery) -> str | None:
    """Lock this destination's marker row (creating it if needed); the delivery hash it holds."""
    cur.execute(
        f"INSERT INTO {MARKER_TABLE} (pipeline_id, destination_id, delivery_hash, batch_id) "
        "VALUES (%s, %s, '', -1) ON CONFLICT (pipeline_id, destination_id) DO NOTHING",
        (delivery.pipeline_id, delivery.destination_id),
    )
    row = cur.execute(
        f"SELECT delivery_hash FROM {MARKER_TABLE} WHERE pipeline_id = %s AND destination_id = %s FOR UPDATE",
        (delivery.pipeline_id, delivery.destination_id),
    ).fetchone()
    return row[0] if row else None


def _store_marker(cur: Any, delivery: Delivery) -> None:
    cur.execute(
        f"UPDATE {MARKER_TABLE} SET delivery_hash = %s, batch_id = %s, committed_at = now() "
        "WHERE pipeline_id = %s AND destination_id = %s",
        (delivery.hash, delivery.batch_id, delivery.pipeline_id, delivery.destination_id),
    )


A_DELETE = "a delete"
"""Why an upsert batch gave way to the staging table: it holds a delete."""


@dataclass
class _Received:
    """The staging rows received from Spark, and what the ``COPY`` straight into the table made of them."""

    batches: list[pa.RecordBatch] = field(default_factory=list)
    copied: int | None = None
    """Rows ``COPY``-ed into the table; None when the batch needs the apply instead."""
    refused_by: str = ""
    """The SQLSTATE with which PostgreSQL refused the ``COPY``, if it did (then the apply does not
    try a ``COPY`` of the whole batch again)."""
    gave_way: str = ""
    """Why the ``COPY`` gave way to the apply, if it did."""

    def refused(self) -> list[tuple[int, str]]:
        """``(seq, err)`` of the rows Spark refused, in source order."""
        return sorted(chain.from_iterable(_refused_in_spark(batch) for batch in self.batches))

    def table(self) -> pa.Table:
        """Every row, in source order."""
        return pa.Table.from_batches(self.batches).sort_by("seq")


def _applicable(rows: pa.RecordBatch) -> pa.RecordBatch:
    return rows.filter(pc.is_null(rows.column("err")))


def _copyable(target: Target, columns: list[str]) -> bool:
    """Whether ``COPY`` can write these columns from their text (not arrays or composites)."""
    return bool(columns) and all(c in target.scalar or c in target.json for c in columns)


def _fields(rows: pa.RecordBatch, layout: Layout) -> list[str]:
    """The columns that some of ``rows`` set (typed layout)."""
    return [c for i, c in enumerate(layout.columns) if pc.any(rows.column(f"p{i}")).as_py()]


def _copy_as_received(
    cur: Any, target: Target, layout: Layout, key: str, batches: Iterator[pa.RecordBatch]
) -> _Received:
    """The rows ``COPY``-ed straight into the table while Spark computes the rest, under a savepoint:
    inserts, or with ``key`` upserts as long as every key is new (see :func:`_write`).

    The ``COPY`` names the columns that the first rows to apply set, and the key. It gives way to the
    apply (rolled back to the savepoint, every batch still received) when a later batch sets another
    column (a column no record sets keeps its default, one that some set is NULL for the others), when a
    column needs more than its text (arrays, composites), when batches come out of source order, when an
    upsert batch holds a delete, or when PostgreSQL refuses a row (the apply then finds which; a key
    already in the table or twice in the batch is refused by the unique index).
    """
    import psycopg

    received = _Received()
    first = None
    for batch in batches:
        received.batches.append(batch)
        first = _applicable(batch)
        if first.num_rows:
            break
    if first is None or not first.num_rows:
        return received  # nothing to apply
    written = _fields(first, layout)
    # (target column, staging column); with a key, the key as the upsert reads it (``.Key`` first).
    columns = [(key, "key")] if key else []
    columns += [(c, layout.value_column(c)) for c in written if c != key]
    if not _copyable(target, [c for c, _ in columns]):
        received.batches.extend(batches)
        return received
    copied, last_seq = 0, -1
    cur.execute("SAVEPOINT conduit_copy")
    try:
        # Giving way leaves the block normally (the COPY of what was sent ends, then is rolled back):
        # psycopg logs a warning when a COPY ended by an exception also fails on the server.
        with cur.copy(copy_statement(table_ident(target.name), [c for c, _ in columns])) as copier:
            rows: pa.RecordBatch | None = first
            while rows is not None and not received.gave_way:
                if rows.num_rows:
                    seqs = rows.column("seq")
                    if (
                        seqs[0].as_py() <= last_seq
                        or not pc.all(pc.greater(seqs[1:], seqs[:-1]), min_count=0).as_py()
                    ):
                        received.gave_way = "out of source order"
                    elif not set(_fields(rows, layout)) <= set(written):
                        received.gave_way = "another column"
                    elif key and pc.any(pc.equal(rows.column("op"), "delete")).as_py():
                        received.gave_way = A_DELETE
                    else:
                        copier.write(csv_rows(rows, [staged for _, staged in columns]))
                        copied, last_seq = copied + rows.num_rows, seqs[-1].as_py()
                batch = next(batches, None)
                if batch is not None:
                    received.batches.append(batch)
                rows = None if batch is None else _applicable(batch)
    except psycopg.Error as error:
        if not is_data_error(error):
            raise
        received.gave_way = f"refused ({sqlstate(error)})"
        received.refused_by = sqlstate(error)
    if received.gave_way:
        cur.execute("ROLLBACK TO SAVEPOINT conduit_copy")
        received.batches.extend(batches)
        return received
    cur.execute("RELEASE SAVEPOINT conduit_copy")
    received.copied = copied
    return received


def _copy_into_staging(cur: Any, layout: Layout, batches: Iterator[pa.RecordBatch]) -> _Received:
    """Every staging row ``COPY``-ed into a temporary staging table while Spark computes the rest."""
    from psycopg import sql

    cur.execute(
        sql.SQL("CREATE TEMPORARY TABLE {} ({}) ON COMMIT DROP").format(
            sql.Identifier(STAGING_TABLE), sql.SQL(layout.ddl())
        )
    )
    received = _Received()
    with cur.copy(copy_statement(sql.Identifier(STAGING_TABLE), layout.copied)) as copier:
        for batch in batches:
            received.batches.append(batch)
            copier.write(csv_rows(batch, layout.copied))
    return received


def _refused_in_spark(rows: pa.Table | pa.RecordBatch) -> list[tuple[int, str]]:
    """``(seq, err)`` of the staging rows that carry an error."""
    refused = rows.filter(pc.is_valid(rows["err"])).select(["seq", "err"]).to_pylist()
    return [(r["seq"], r["err"]) for r in refused]


_UPSERTS_NOT_COPIED: set[tuple[str, ...]] = set()
"""Destinations (URL, table, pipeline, destination) whose upserts met a key already in the table, or a
delete, in this process: their upserts go through the staging table from then on."""
_UNIQUE_VIOLATION = "23505"


def _write(
    conn: Any,
    url: str,
    layout: Layout,
    key: str,
    target: Target | None,
    batches: Iterator[pa.RecordBatch],
    delivery: Delivery,
) -> tuple[list[tuple[int, str]], int, str]:
    """Write the staging rows, as Spark hands them over, inside the open transaction (steps 3 and 4 of
    the protocol); ``(nacks, rows affected, how)``.

    Upserts into a table whose key has a unique index try the ``COPY`` first: while every key is new
    (a snapshot, a first load) an upsert is an insert. The first batch that meets a key already there,
    or holds a delete (CDC, in both cases), costs one ``COPY`` given up; the destination then upserts
    through the staging table for the rest of the run.
    """
    cur = conn.cursor()
    upserts = (safe_url(url), target.name if target else "", delivery.pipeline_id, delivery.destination_id)
    direct = (
        layout.typed
        and target is not None
        and (not key or (target.unique_key and upserts not in _UPSERTS_NOT_COPIED))
    )
    received = (
        _copy_as_received(cur, target, layout, key, batches)
        if direct and target is not None  # direct implies a target; said again for the type checker
        else _copy_into_staging(cur, layout, batches)
    )
    if key and (received.refused_by == _UNIQUE_VIOLATION or received.gave_way == A_DELETE):
        _UPSERTS_NOT_COPIED.add(upserts)
        reason = "a batch holds deletes" if received.gave_way == A_DELETE else f"keys already in {upserts[1]}"
        logger.info(
            "postgres destination %s: %s: upserts go through the staging table from now on",
            delivery.destination_id,
            reason,
        )
    if not received.batches:
        return [], 0, NOTHING
    if received.copied is not None:
        return received.refused(), received.copied, COPIED
    return _apply(
        conn,
        url,
        layout,
        key,
        received.table(),
        staged=not direct,
        copy=not received.refused_by,
        nack_limit=delivery.nack_limit,
    )


def _apply(
    conn: Any,
    url: str,
    layout: Layout,
    key: str,
    rows: pa.Table,
    *,
    staged: bool,
    copy: bool,
    nack_limit: int | None = None,
) -> tuple[list[tuple[int, str]], int, str]:
    """Apply the whole batch: straight into the table when ``copy`` allows and it holds only inserts into
    one table, else from the staging table (filled first unless ``staged``)."""
    applicable = rows.filter(pc.is_null(rows["err"]))
    tables = summarise(applicable, layout)
    if not tables:  # nothing to write: every record is nacked (or the batch is empty)
        return _refused_in_spark(rows), 0, NOTHING
    cur = conn.cursor()
    if copy and layout.typed and not key and len(tables) == 1:
        [name] = tables
        # The batch as one Arrow batch: the COPY names every column that some record sets.
        whole = iter(rows.combine_chunks().to_batches())
        if _copy_as_received(cur, read_target(cur, name, key), layout, key, whole).copied is not None:
            return _refused_in_spark(rows), applicable.num_rows, COPIED
    if not staged:
        _copy_into_staging(cur, layout, iter(rows.to_batches()))
    return (*apply_batch(conn, url, STAGING_TABLE, layout, key, tables, nack_limit), APPLIED)


def stage(records: DataFrame, settings: PostgresDestinationSettings, delivery: Delivery) -> StagedPostgres:
    """Compute the batch's staging rows and write them in an open transaction (see the module doc)."""
    url, key = settings.url, settings.key
    context = f"postgres destination {delivery.destination_id} ({safe_url(url)})"
    started = time.perf_counter()
    conn = connect(url)
    staged = StagedPostgres(conn, url)
    try:
        with classified(url, context):
            layout, target = _prepare(conn, settings.table, key)
            cur = conn.cursor()
            held = _lock_marker(cur, delivery)
            if held and held == delivery.hash:
                # Another run committed this batch since the engine asked delivered(): nothing to write.
                conn.rollback()
                return staged
            json_columns = [c for c in target.columns if c not in target.scalar] if target else []
            # Closed on an error too: Spark's socket closes when the write fails, not when the
            # traceback that holds the generator is freed.
            with closing(stream(staging_frame(records, settings, layout, json_columns), context)) as batches:
                staged.nacks, staged.applied, how = _write(conn, url, layout, key, target, batches, delivery)
            _store_marker(cur, delivery)
            logger.info(
                "%s: batch %d computed and %s in %.2f s (%d rows affected, %d nacked)",
                context,
                delivery.batch_id,
                how,
                time.perf_counter() - started,
                staged.applied,
                len(staged.nacks),
            )
    except BaseException:
        staged.discard()
        raise
    return staged


def delivered(settings: PostgresDestinationSettings, delivery: Delivery) -> bool:
    """Whether the target already holds this delivery: its marker row carries ``delivery.hash``."""
    if not delivery.hash:
        return False
    url = settings.url
    with (
        classified(url, f"postgres destination {delivery.destination_id} ({safe_url(url)})"),
        connect(url) as conn,
    ):
        if conn.execute("SELECT to_regclass(%s)", (MARKER_TABLE,)).fetchone()[0] is None:
            return False
        row = conn.execute(
            f"SELECT delivery_hash FROM {MARKER_TABLE} WHERE pipeline_id = %s AND destination_id = %s",
            (delivery.pipeline_id, delivery.destination_id),
        ).fetchone()
    return row is not None and row[0] == delivery.hash
