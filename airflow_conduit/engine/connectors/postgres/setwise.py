"""The set-wise apply of the ``builtin:postgres`` destination: a batch's staging rows, held in a
temporary table, written to their target tables with one statement per table and operation kind.

Without ``key``, inserts in source order. With ``key``, the net effect per key (its last operation in the
batch): deletes with ``DELETE ... USING``, the rest as ``INSERT ... ON CONFLICT (key) DO UPDATE``. A data
error (SQLSTATE class 22/23) rolls back to a savepoint and the batch is applied again in halves of its seq
range, down to the single records PostgreSQL refuses (Transporter's resume phase, bisected). The halves
are found through an index on the staging table's ``seq`` built at that moment, and the search ends early
once the batch holds more refused records than the DLQ window can take (the batch then stops the
pipeline anyway).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_conduit.engine.connectors.postgres._common import is_data_error, redact
from airflow_conduit.engine.connectors.postgres.staging import Layout, summaries
from airflow_conduit.errors import Code, FatalError, TransientError
from airflow_conduit.record import META_COLLECTION

logger = logging.getLogger("airflow_conduit.destination.postgres")

# --- target tables -------------------------------------------------------------------------------


def table_ident(name: str) -> Any:
    """``schema.table`` or ``table`` as a quoted identifier."""
    from psycopg import sql

    return sql.Identifier(*name.split(".", 1))


@dataclass(frozen=True)
class Target:
    """A target table as the apply needs it."""

    name: str
    columns: tuple[str, ...]
    """Columns a record may set (generated columns excluded)."""
    key_type: str = ""
    scalar: dict[str, str] = field(default_factory=dict)
    """Columns read from the JSON text with ``->>`` and a cast to this type (no typmod, so the insert's
    own assignment cast still refuses a too long value instead of an explicit cast cutting it)."""
    json: dict[str, str] = field(default_factory=dict)
    """json/jsonb columns, read with ``->``; the rest (arrays, composites) go through
    ``jsonb_populate_record``."""
    unique_key: bool = False
    """The key column has a unique index of its own, checked at once."""


def read_target(cur: Any, name: str, key: str) -> Target:
    ident = table_ident(name).as_string(cur.connection)
    if cur.execute("SELECT to_regclass(%s)", (ident,)).fetchone()[0] is None:
        raise FatalError(
            f"postgres destination: table {ident} does not exist: create it, or check `table` "
            f"(or the records' {META_COLLECTION})",
            code=Code.DESTINATION_FAILED,
        )
    # Each type by its own name, without typmod (format_type(bpchar, NULL) would say "character", which
    # is char(1)): the insert's assignment cast then checks lengths.
    rows = cur.execute(
        "SELECT a.attname, quote_ident(n.nspname) || '.' || quote_ident(t.typname), a.attgenerated <> '', "
        "t.typcategory IN ('B', 'D', 'N', 'S', 'T', 'V', 'I', 'E'), a.atttypid IN ('json'::regtype, 'jsonb'::regtype) "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (ident,),
    ).fetchall()
    types = {row[0]: row[1] for row in rows}
    if key and key not in types:
        raise FatalError(
            f"postgres destination: key column {key!r} does not exist in table {ident} "
            f"(columns: {', '.join(types)})",
            code=Code.DESTINATION_FAILED,
        )
    # A unique index on the key alone, checked at once (not deferred, not partial): a COPY that meets a
    # key already there fails on it, which lets upserts of new keys try a plain COPY first.
    unique_key = (
        bool(key)
        and cur.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] WHERE i.indrelid = %s::regclass "
            "AND i.indisunique AND i.indimmediate AND i.indnkeyatts = 1 AND i.indpred IS NULL "
            "AND i.indexprs IS NULL AND a.attname = %s)",
            (ident, key),
        ).fetchone()[0]
    )
    return Target(
        name,
        tuple(row[0] for row in rows if not row[2]),
        types.get(key, ""),
        {row[0]: row[1] for row in rows if row[3]},
        {row[0]: row[1] for row in rows if row[4]},
        unique_key,
    )


@dataclass
class TableBatch:
    """What the batch holds for one table (:func:`~.staging.summaries`)."""

    fields: set[str] = field(default_factory=set)
    deletes: bool = False
    upserts: bool = False


def summarise(applicable: pa.Table, layout: Layout) -> dict[str, TableBatch]:
    """What the staging rows to apply hold, per table."""
    tables: dict[str, TableBatch] = {}
    for name, operation, fields, _count in summaries(applicable, layout):
        table = tables.setdefault(name, TableBatch())
        if operation == "delete":
            table.deletes = True
        else:
            table.upserts = True
            table.fields.update(fields)
    return tables


_ALL = (-(2**63), 2**63 - 1)
"""The whole seq range."""


def _apply_range(
    cur: Any, staging: str, layout: Layout, target: Target, batch: TableBatch, key: str, lo: int, hi: int
) -> int:
    """Apply the staged rows of ``target`` with ``lo <= seq < hi``; the rows affected."""
    from psycopg import sql

    table = table_ident(target.name)
    stage = sql.Identifier(staging)
    written = [c for c in target.columns if c in batch.fields or c == key]
    cols = sql.SQL(", ").join(map(sql.Identifier, written))
    values = [c for c in written if c != key]
    if layout.typed:
        # Text cast to the column's type (no typmod, so the insert's own assignment cast still refuses
        # a too long value instead of an explicit cast cutting it); arrays and composites from their JSON.
        staged: list[sql.Composable] = [
            sql.SQL("s.{}").format(sql.Identifier(layout.value_column(c))) for c in values
        ]
        populate = False

        def value(column: str) -> Any:
            text = sql.SQL("x.{}").format(sql.Identifier(layout.value_column(column)))
            if column == key:
                return sql.SQL("x.k")
            if column in target.scalar or column in target.json:
                kind = target.scalar.get(column) or target.json[column]
                return sql.SQL("{}::{}").format(text, sql.SQL(kind))
            return sql.SQL("(jsonb_populate_record(NULL::{}, jsonb_build_object({}, {}::jsonb))).{}").format(
                table, sql.Literal(column), text, sql.Identifier(column)
            )

        key_text = sql.SQL("s.key")
    else:
        # Scalars straight from the JSON text (cheaper than building a whole record per row), json as
        # is, anything else (arrays, composites) the way jsonb_populate_record converts it.
        staged = [sql.SQL("s.after")]
        populate = any(c not in target.scalar and c not in target.json for c in values)

        def value(column: str) -> Any:
            name = sql.Literal(column)
            if column == key:
                return sql.SQL("x.k")
            if column in target.scalar:
                return sql.SQL("(x.after ->> {})::{}").format(name, sql.SQL(target.scalar[column]))
            if column in target.json:
                return sql.SQL("nullif(x.after -> {}, 'null'::jsonb)::{}").format(
                    name, sql.SQL(target.json[column])
                )
            return sql.SQL("r.{}").format(sql.Identifier(column))

        key_text = sql.SQL("s.key #>> '{}'")
    payload = sql.SQL("").join(sql.SQL(", {}").format(item) for item in staged)
    picked = sql.SQL(", ").join(value(c) for c in written)
    lateral = (
        sql.SQL("CROSS JOIN LATERAL jsonb_populate_record(NULL::{}, x.after) r").format(table)
        if populate
        else sql.SQL("")
    )
    where = sql.SQL("s.tbl = %(tbl)s AND s.err IS NULL AND s.seq >= %(lo)s AND s.seq < %(hi)s")
    params = {"tbl": target.name, "lo": lo, "hi": hi}
    if not key:
        # Source order. Each seq is staged once; DISTINCT ON only guards that, at no cost next to the sort.
        statement = sql.SQL(
            "INSERT INTO {table} ({cols}) SELECT {picked} FROM "
            "(SELECT DISTINCT ON (s.seq) s.seq{payload} FROM {stage} s WHERE {where} ORDER BY s.seq) x "
            "{lateral} ORDER BY x.seq"
        ).format(
            table=table, cols=cols, picked=picked, payload=payload, stage=stage, where=where, lateral=lateral
        )
        return cur.execute(statement, params).rowcount
    # The net effect per key: its last operation in the batch. The key is compared as the column's type.
    latest = sql.SQL(
        "SELECT DISTINCT ON (k) * FROM "
        "(SELECT ({key_text})::{ktype} AS k, s.op, s.seq{payload} FROM {stage} s WHERE {where}) y "
        "ORDER BY k, seq DESC"
    ).format(key_text=key_text, ktype=sql.SQL(target.key_type), payload=payload, stage=stage, where=where)
    kcol = sql.Identifier(key)
    affected = 0
    if batch.deletes:
        affected += cur.execute(
            sql.SQL(
                "WITH latest AS ({latest}) DELETE FROM {table} t USING latest x "
                "WHERE x.op = 'delete' AND t.{k} = x.k"
            ).format(latest=latest, table=table, k=kcol),
            params,
        ).rowcount
    if batch.upserts:
        updates = [c for c in written if c != key]
        on_conflict = (
            sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updates)
            )
            if updates
            else sql.SQL("DO NOTHING")
        )
        affected += cur.execute(
            sql.SQL(
                "WITH latest AS ({latest}) INSERT INTO {table} ({cols}) SELECT {picked} FROM latest x "
                "{lateral} WHERE x.op <> 'delete' ON CONFLICT ({k}) {on_conflict}"
            ).format(
                latest=latest,
                table=table,
                cols=cols,
                picked=picked,
                lateral=lateral,
                k=kcol,
                on_conflict=on_conflict,
            ),
            params,
        ).rowcount
    return affected


class _EnoughNacks(Exception):
    """More records refused than the batch may nack: looking for the rest is pointless."""


class _Applier:
    """Applies the staged batch in bulk; on a data error bisects the seq range down to the records
    PostgreSQL refuses, applying everything else in source order.

    ``nack_limit``: the most refused records the batch may have (None: any number). Past it the search
    stops; the nacks found so far are the earliest in source order, which is what decides the DLQ window.
    """

    def __init__(
        self, cur: Any, url: str, staging: str, layout: Layout, key: str, nack_limit: int | None = None
    ) -> None:
        self.cur, self.url, self.staging, self.layout, self.key = cur, url, staging, layout, key
        self.nack_limit = nack_limit
        self.targets: list[tuple[Target, TableBatch]] = []
        self.nacks: list[tuple[int, str]] = []
        self.applied = 0
        self.statements = 0

    def _apply(self, lo: int, hi: int) -> None:
        for target, batch in self.targets:
            self.applied += _apply_range(self.cur, self.staging, self.layout, target, batch, self.key, lo, hi)

    def _try(self, lo: int, hi: int) -> BaseException | None:
        """Apply ``[lo, hi)`` under a savepoint; the data error that undid it, if any."""
        import psycopg

        cur, applied = self.cur, self.applied
        self.statements += 1
        cur.execute("SAVEPOINT conduit_apply")
        try:
            self._apply(lo, hi)
        except psycopg.Error as error:
            if not is_data_error(error):
                raise
            cur.execute("ROLLBACK TO SAVEPOINT conduit_apply")
            cur.execute("RELEASE SAVEPOINT conduit_apply")
            self.applied = applied
            return error
        cur.execute("RELEASE SAVEPOINT conduit_apply")
        return None

    def run(self) -> None:
        from psycopg import sql

        error = self._try(*_ALL)
        if error is None:
            return  # the common case: one statement per table and operation kind
        started = time.perf_counter()
        logger.info(
            "postgres: the batch was refused in bulk (%s); applying it in parts to find the refused records",
            self._message(error).removeprefix("postgres: "),
        )
        stage = sql.Identifier(self.staging)
        # Each part selects a seq range: without an index every part would scan the whole batch.
        self.cur.execute(sql.SQL("CREATE INDEX ON {} (seq)").format(stage))
        self.cur.execute(sql.SQL("ANALYZE {}").format(stage))
        seqs = [
            row[0]
            for row in self.cur.execute(
                sql.SQL("SELECT DISTINCT seq FROM {} WHERE err IS NULL ORDER BY seq").format(stage)
            ).fetchall()
        ]
        try:
            self._bisect(seqs, 0, len(seqs))
        except _EnoughNacks:
            logger.info(
                "postgres: stopped looking after %d refused records (%.2f s): the batch may nack at "
                "most %d, so it stops the pipeline",
                len(self.nacks),
                time.perf_counter() - started,
                self.nack_limit,
            )
            return
        logger.info(
            "postgres: %d records refused, the rest applied, in %d statements and %.2f s",
            len(self.nacks),
            self.statements,
            time.perf_counter() - started,
        )

    def _message(self, error: BaseException) -> str:
        message = getattr(getattr(error, "diag", None), "message_primary", None) or str(error).splitlines()[0]
        return f"postgres: {redact(message, self.url)}"

    def _bisect(self, seqs: list[int], first: int, last: int) -> None:
        lo = seqs[first]
        hi = seqs[last] if last < len(seqs) else _ALL[1]
        error = self._try(lo, hi)
        if error is None:
            return
        if last - first == 1:
            self.nacks.append((lo, self._message(error)))
            if self.nack_limit is not None and len(self.nacks) > self.nack_limit:
                raise _EnoughNacks
            return
        middle = (first + last) // 2
        self._bisect(seqs, first, middle)
        self._bisect(seqs, middle, last)


def apply_batch(
    conn: Any,
    url: str,
    staging: str,
    layout: Layout,
    key: str,
    tables: dict[str, TableBatch],
    nack_limit: int | None = None,
) -> tuple[list[tuple[int, str]], int]:
    """Apply the staging table inside the open transaction; ``(nacks, rows affected)``. With
    ``nack_limit``, the search for refused records stops past that many (see :class:`_Applier`)."""
    from psycopg import sql

    cur = conn.cursor()
    # The apply sorts the batch (source order, last operation per key): keep the sort in memory.
    cur.execute("SET LOCAL work_mem = '64MB'")
    stage = sql.Identifier(staging)
    applier = _Applier(cur, url, staging, layout, key, nack_limit)
    for name in sorted(tables):
        target = read_target(cur, name, key)
        batch = tables[name]
        unknown = sorted(batch.fields - set(target.columns) - {key})
        if unknown and layout.typed:
            # Typed staging nacked unknown fields already, against the columns read before the copy.
            raise TransientError(
                f"postgres destination: columns {unknown} of {name} were dropped while the batch was staged",
                code=Code.DESTINATION_FAILED,
            )
        # Nack the records that set a column the table does not have, as PostgreSQL would refuse them.
        for column in unknown:
            cur.execute(
                sql.SQL("UPDATE {stage} SET err = %s WHERE tbl = %s AND err IS NULL AND after ? %s").format(
                    stage=stage
                ),
                (f'postgres: column "{column}" of relation "{name}" does not exist', name, column),
            )
        batch.fields &= set(target.columns)
        if not key and batch.upserts and not batch.fields:
            cur.execute(
                sql.SQL("UPDATE {stage} SET err = %s WHERE tbl = %s AND err IS NULL").format(stage=stage),
                (f'postgres: .Payload.After sets no column of relation "{name}"', name),
            )
            continue
        applier.targets.append((target, batch))
    applier.run()
    refused = cur.execute(
        sql.SQL("SELECT DISTINCT seq, err FROM {stage} WHERE err IS NOT NULL").format(stage=stage)
    ).fetchall()
    nacks = sorted([(int(seq), str(err)) for seq, err in refused] + applier.nacks)
    return nacks, applier.applied
