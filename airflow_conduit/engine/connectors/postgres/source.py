"""``builtin:postgres`` source: a snapshot of the tables, then change data capture.

**Snapshot** (``snapshotMode: initial``): each table in turn, in key order (the ``key`` setting, else the
table's single-column primary key), ``maxRecordsPerBatch`` rows per micro-batch, operation ``snapshot``.
The offset names the last key of the page (``{"phase": "snapshot", "table": i, "after": KEY, ...}``), and
``latestOffset`` fixes the page's end key, so a replayed batch reads the same key range.

**CDC, logical replication** (``cdcMode: logrepl``; ``auto`` means the same): a ``test_decoding``
replication slot (``logrepl.slotName``) is created *before* the snapshot is read, so no change committed
in between is lost. A change committed while the snapshot runs may arrive twice (in the snapshot and as
a change): destinations that upsert by key make that harmless. Offsets are commit LSNs (transactions
come out in commit order, but a later transaction's changes can have lower LSNs than an earlier one's
commit). ``latestOffset`` peeks whole transactions up to about ``maxRecordsPerBatch`` changes; ``read``
peeks again up to the batch's end and skips what committed at or before its start. The slot is advanced
(``pg_replication_slot_advance``) only in ``commit``, which Spark calls after the batch was committed,
i.e. after every destination holds it: the source acks after persist, never before. Until then
PostgreSQL keeps the WAL, so a crashed run loses nothing.

**CDC, long polling** (``cdcMode: long_polling``), for users without the REPLICATION attribute: rows
whose ``orderingColumn`` is greater than the last one read, as ``create`` records. It sees inserts (and
updates that raise the ordering column) but not deletes; rows committed late with a lower value than one
already read are missed, as with any polling.

Records: ``.Key`` is the key columns, ``.Payload.After`` the new row, ``.Payload.Before`` the old row
where PostgreSQL logs it (``REPLICA IDENTITY FULL``, or a changed key; a delete's identity columns),
metadata ``opencdc.collection`` and ``postgres.table`` the table name as configured. Values are
converted by type: integers and numerics as JSON numbers (digits kept), booleans, json/jsonb as
documents, null; everything else as its PostgreSQL text. Unchanged TOASTed values, which the WAL does not
carry, are taken from the old row when it is there and left out otherwise. ``TRUNCATE`` is not turned
into records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_conduit.engine.connectors._stream import (
    SourceContext,
    parse_options,
    read_python_source,
    stop_requested,
)
from airflow_conduit.engine.connectors.postgres import _common
from airflow_conduit.engine.connectors.postgres.test_decoding import (
    Change,
    Column,
    columns_json,
    lsn_to_int,
    parse_row,
    table_of,
)
from airflow_conduit.errors import Code, ConduitError, FatalError
from airflow_conduit.record import META_COLLECTION

META_TABLE = "postgres.table"
PLUGIN_OPTIONS = ("skip-empty-xacts", "1")
ARROW_ROWS = 10_000


@dataclass(frozen=True)
class Table:
    """A configured table, resolved against the database once."""

    name: str
    """As configured: the records' ``opencdc.collection``."""
    qualified: str
    """``schema.table``, quoted where needed: how SQL and ``test_decoding`` name it."""
    columns: tuple[tuple[str, str], ...]
    """``(name, type)`` in table order; types as ``format_type`` prints them."""
    key: tuple[str, ...]
    """The record key's columns: the ``key`` setting, else the primary key."""
    order: str
    """The column that orders the snapshot (or ``orderingColumn`` for long polling); may be empty."""

    def type_of(self, column: str) -> str:
        return dict(self.columns).get(column, "text")

    def select_list(self) -> str:
        # As text, by each type's output function: the same text test_decoding prints, converted alike.
        return ", ".join(f"{_ident(name)}::text" for name, _ in self.columns)


@dataclass(frozen=True)
class Config:
    url: str
    tables: tuple[str, ...]
    key: str
    snapshot: bool
    mode: str
    """``logrepl`` or ``long_polling``."""
    slot: str
    ordering_column: str
    poll_interval: float
    max_records: int

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Config:
        tables = tuple(t.strip() for t in str(settings["tables"]).split(",") if t.strip())
        mode = str(settings.get("cdcMode", "auto"))
        return cls(
            url=str(settings["url"]),
            tables=tables,
            key=str(settings.get("key") or ""),
            snapshot=str(settings.get("snapshotMode", "initial")) == "initial",
            mode="long_polling" if mode == "long_polling" else "logrepl",
            slot=str(settings.get("logrepl.slotName") or "conduitslot"),
            ordering_column=str(settings.get("orderingColumn") or ""),
            poll_interval=float(settings.get("pollingPeriod") or 1.0),
            max_records=int(settings["maxRecordsPerBatch"]),
        )


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _classified(url: str, context: str) -> AbstractContextManager[None]:
    """psycopg errors as TransientError / FatalError (never with the password); ours pass through."""
    return _common.classified(url, context, Code.SOURCE_FAILED)


def _connect(url: str, autocommit: bool = True) -> Any:
    return _common.connect(url, code=Code.SOURCE_FAILED, autocommit=autocommit)


# metadata ------------------------------------------------------------------------------------------


def resolve_tables(conn: Any, config: Config) -> tuple[Table, ...]:
    """Each configured table's qualified name, columns and key; FatalError naming what to fix."""
    resolved = []
    for name in config.tables:
        row = conn.execute(
            "SELECT c.oid::int, quote_ident(n.nspname) || '.' || quote_ident(c.relname) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
            (name,),
        ).fetchone()
        if row is None:
            raise FatalError(
                f"postgres source: table {name!r} does not exist in {_common.safe_url(config.url)}: "
                "create it, or fix `tables` in the settings",
                code=Code.SOURCE_FAILED,
            )
        oid, qualified = row
        columns = tuple(
            conn.execute(
                "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
                "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                (oid,),
            ).fetchall()
        )
        primary = tuple(
            r[0]
            for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
                "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = %s AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
                (oid,),
            ).fetchall()
        )
        names = {c for c, _ in columns}
        for setting, column in (("key", config.key), ("orderingColumn", config.ordering_column)):
            if column and column not in names:
                raise FatalError(
                    f"postgres source: table {name!r} has no column {column!r}: fix `{setting}`",
                    code=Code.SOURCE_FAILED,
                )
        key = (config.key,) if config.key else primary
        order = config.ordering_column if config.mode == "long_polling" else (key[0] if len(key) == 1 else "")
        if config.snapshot and config.mode == "logrepl" and not order:
            what = "a composite primary key" if key else "no primary key"
            raise FatalError(
                f"postgres source: table {name!r} has {what}: set `key` to a unique column that orders "
                "the snapshot",
                code=Code.SOURCE_FAILED,
            )
        resolved.append(Table(name, qualified, columns, key, order))
    return tuple(resolved)


def _slot_position(conn: Any, slot: str) -> str | None:
    """The slot's confirmed_flush_lsn, or None when it does not exist (in this database)."""
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text, plugin FROM pg_replication_slots "
        "WHERE slot_name = %s AND database = current_database()",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    if row[1] != "test_decoding":
        raise FatalError(
            f"postgres source: replication slot {slot!r} uses plugin {row[1]!r}, not test_decoding: "
            "drop it or choose another `logrepl.slotName`",
            code=Code.SOURCE_FAILED,
        )
    return row[0]


def ensure_slot(conn: Any, slot: str) -> str:
    """Create the logical replication slot unless it exists; its confirmed position."""
    position = _slot_position(conn, slot)
    if position is None:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
        position = _slot_position(conn, slot)
    assert position is not None
    return position


def _missing_slot(config: Config) -> FatalError:
    return FatalError(
        f"postgres source: replication slot {config.slot!r} does not exist any more, so changes since the "
        "last acknowledged position may be lost: start from a new checkpoint (snapshot again)",
        code=Code.SOURCE_FAILED,
    )


# offsets -------------------------------------------------------------------------------------------


def snapshot_offset(table: int, after: str | None, lsn: str) -> dict:
    return {"phase": "snapshot", "table": table, "after": after, "lsn": lsn}


def cdc_offset(lsn: str) -> dict:
    return {"phase": "cdc", "lsn": lsn}


def poll_offset(last: list[str | None]) -> dict:
    return {"phase": "poll", "last": last}


def page_end(
    conn: Any, table: Table, column: str, after: str | None, limit: int, upto: str | None = None
) -> tuple[str | None, int]:
    """The last ``column`` value of the next page of at most ``limit`` rows after ``after`` (and at or
    below ``upto``), with the page's row count; ``(None, 0)`` when there is none."""
    col, cast = _ident(column), table.type_of(column)
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


# records -------------------------------------------------------------------------------------------


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


def peek(conn: Any, slot: str, upto: str | None, nchanges: int | None) -> list[tuple[str, str]]:
    """``(lsn, data)`` rows of whole transactions, without consuming them."""
    return conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, %s::pg_lsn, %s, %s, %s)",
        (slot, upto, nchanges, *PLUGIN_OPTIONS),
    ).fetchall()


def cdc_end(
    conn: Any, config: Config, tables: dict[str, Table], start: str, budget: int, upto: str | None
) -> str | None:
    """The commit LSN that ends the next batch after ``start``: whole transactions holding about
    ``budget`` changes of the tables. Transactions touching none of them are included behind relevant
    ones, or on their own once there are ``budget`` of their changes, so the slot can move past
    unrelated traffic without an empty batch on every poll."""
    begin = lsn_to_int(start)
    nchanges = budget + 2
    while True:
        rows = peek(conn, config.slot, upto, nchanges)
        relevant = unrelated = pending_relevant = pending_unrelated = 0
        last: str | None = None
        for lsn, data in rows:
            if data.startswith("table "):
                is_ours = table_of(data) in tables
                pending_relevant += is_ours
                pending_unrelated += not is_ours
            elif data.startswith("COMMIT"):
                if lsn_to_int(lsn) > begin:
                    relevant += pending_relevant
                    unrelated += pending_unrelated
                    last = lsn
                    if relevant >= budget:
                        return last
                pending_relevant = pending_unrelated = 0
        if len(rows) < nchanges:  # the end of what is there (peek returns at least nchanges otherwise)
            return last if (relevant or unrelated >= budget) else None
        nchanges *= 2  # transactions at or before `start`, or unrelated ones, used up the budget


def read_changes(
    conn: Any, config: Config, tables: dict[str, Table], start: str, end: str
) -> Iterator[tuple]:
    """The records of the transactions that committed in ``(start, end]``, in commit order."""
    if lsn_to_int(end) <= lsn_to_int(start):
        return  # the batch that ends the snapshot may hold no change
    confirmed = _slot_position(conn, config.slot)
    if confirmed is None:
        raise _missing_slot(config)
    if lsn_to_int(confirmed) > lsn_to_int(start):
        raise FatalError(
            f"postgres source: replication slot {config.slot!r} was advanced to {confirmed}, past this "
            f"pipeline's position {start}: another consumer uses the slot and changes are lost; give each "
            "pipeline its own `logrepl.slotName`",
            code=Code.SOURCE_FAILED,
        )
    begin, finish = lsn_to_int(start), lsn_to_int(end)
    pending: list[tuple[Table, Change]] = []
    cursor = conn.cursor()
    query = "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, %s::pg_lsn, NULL, %s, %s)"
    for lsn, data in cursor.stream(query, (config.slot, end, *PLUGIN_OPTIONS)):
        if data.startswith("table "):
            table = tables.get(table_of(data) or "")
            if table is not None:
                change = parse_row(data)
                assert isinstance(change, Change)
                pending.append((table, change))
            continue
        if not data.startswith("COMMIT"):
            continue
        commit = lsn_to_int(lsn)
        if begin < commit <= finish:
            for index, (table, change) in enumerate(pending):
                record = change_record(table, change, f"{lsn}:{index}")
                if record is not None:
                    yield record
        pending = []
        if commit >= finish:
            break


# Spark ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch(InputPartition):
    """What an executor needs to read one micro-batch (one partition: records stay in source order)."""

    config: Config
    tables: tuple[Table, ...]
    phase: str
    table: int = 0
    after: str | None = None
    upto: str | None = None
    lsn_from: str = "0/0"
    lsn_to: str = "0/0"
    poll: tuple[tuple[str | None, str | None], ...] = ()
    """long polling: per table, ``(after, upto)``."""


class PostgresStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        parsed = parse_options(options)
        self.stop_file = parsed.stop_file
        self.config = Config.from_settings(parsed.settings)
        self._conn: Any = None
        self._tables: tuple[Table, ...] | None = None
        self._target: Any = None  # AvailableNow: the LSN (or per-table maxima) when the run began
        self._available_now = False
        self._last_empty_poll = 0.0

    # connection and metadata, on the driver's Python worker
    def _db(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = _connect(self.config.url)
        return self._conn

    @contextmanager
    def _session(self, context: str) -> Iterator[Any]:
        try:
            with _classified(self.config.url, f"postgres source: {context}"):
                yield self._db()
        except ConduitError:
            if self._conn is not None:
                self._conn.close()  # a fresh connection next time, whatever state this one is in
                self._conn = None
            raise

    def _resolved(self, conn: Any) -> tuple[Table, ...]:
        if self._tables is None:
            self._tables = resolve_tables(conn, self.config)
        return self._tables

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def initialOffset(self) -> dict:
        return self._initial_offset(create_slot=True)

    def inspection_start(self) -> dict:
        """The initial offset for ``airflow-conduit inspect``, which must not create the slot."""
        return self._initial_offset(create_slot=False)

    def _initial_offset(self, create_slot: bool) -> dict:
        config = self.config
        with self._session("cannot start") as conn:
            tables = self._resolved(conn)
            if config.mode == "long_polling":
                if config.snapshot:
                    return poll_offset([None] * len(tables))
                return poll_offset([_max_of(conn, t, t.order) for t in tables])
            if not create_slot:  # without the slot, snapshot pages can still be read; changes cannot
                position = _slot_position(conn, config.slot) or "0/0"
            else:
                # The slot first: every change committed after this point is kept for us.
                with _classified(
                    config.url,
                    f"postgres source: cannot create replication slot {config.slot!r} (the user needs the "
                    "REPLICATION attribute, the server wal_level=logical; or use cdcMode long_polling)",
                ):
                    position = ensure_slot(conn, config.slot)
            if config.snapshot and tables:
                return snapshot_offset(0, None, position)
            return cdc_offset(position)

    def unreadable(self, start: dict, end: dict) -> str | None:
        """Why ``airflow-conduit inspect`` cannot read this range again: the changes of a batch are
        released from the slot once it committed. Snapshot and polling pages can always be read again
        (as the rows are now)."""
        if end.get("phase") != "cdc" or start.get("lsn") == end["lsn"]:
            return None
        with self._session("cannot read the slot's position") as conn:
            confirmed = _slot_position(conn, self.config.slot)
        if confirmed is None:
            return f"replication slot {self.config.slot!r} does not exist any more"
        if lsn_to_int(confirmed) > lsn_to_int(start["lsn"]):
            return (
                f"PostgreSQL released these changes: replication slot {self.config.slot!r} is confirmed "
                f"up to {confirmed}, past the batch's start {start['lsn']} (a batch's changes are "
                "released once it commits)"
            )
        return None

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True
        with self._session("cannot read the current position") as conn:
            if self.config.mode == "long_polling":
                self._target = [_max_of(conn, t, t.order) for t in self._resolved(conn)]
            else:
                self._target = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if stop_requested(self.stop_file):
            return start
        if not self._available_now and time.monotonic() - self._last_empty_poll < self.config.poll_interval:
            return start
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else self.config.max_records
        with self._session("cannot read changes") as conn:
            end = self._next_end(conn, start, budget)
        if end is start:
            self._last_empty_poll = time.monotonic()
        return end

    def _next_end(self, conn: Any, start: dict, budget: int) -> dict:
        tables = self._resolved(conn)
        if start["phase"] == "poll":
            last = list(start["last"])
            ends, moved = list(last), False
            for i, table in enumerate(tables):
                if budget <= 0:
                    break
                upto = self._target[i] if self._available_now and self._target else None
                if self._available_now and upto is None:
                    continue  # the table was empty when the run began
                value, count = page_end(conn, table, table.order, last[i], budget, upto)
                if value is not None:
                    ends[i], budget, moved = value, budget - count, True
            return poll_offset(ends) if moved else start
        if start["phase"] == "snapshot":
            for i in range(int(start["table"]), len(tables)):
                after = start["after"] if i == start["table"] else None
                value, _ = page_end(conn, tables[i], tables[i].order, after, budget)
                if value is not None:
                    return snapshot_offset(i, value, start["lsn"])
            # The snapshot is done: the next batch holds the changes since the slot was created.
            end = self._cdc_end(conn, tables, start["lsn"], budget)
            return cdc_offset(end or start["lsn"])
        end = self._cdc_end(conn, tables, start["lsn"], budget)
        return cdc_offset(end) if end else start

    def _cdc_end(self, conn: Any, tables: tuple[Table, ...], start: str, budget: int) -> str | None:
        upto = self._target if self._available_now else None
        if upto is not None and lsn_to_int(upto) <= lsn_to_int(start):
            return None
        by_name = {t.qualified: t for t in tables}
        try:
            return cdc_end(conn, self.config, by_name, start, budget, upto)
        except Exception as error:
            if _common.sqlstate(error) == "42704":  # undefined_object: the slot is gone
                raise _missing_slot(self.config) from None
            raise

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        tables = self._tables
        if tables is None:
            with self._session("cannot read table metadata") as conn:
                tables = self._resolved(conn)
        config = self.config
        if end["phase"] == "poll":
            spans = tuple(zip(start["last"], end["last"], strict=True))
            return [_Batch(config, tables, "poll", poll=spans)]
        if end["phase"] == "snapshot":
            same = start["phase"] == "snapshot" and start["table"] == end["table"]
            after = start["after"] if same else None
            return [
                _Batch(config, tables, "snapshot", table=int(end["table"]), after=after, upto=end["after"])
            ]
        return [_Batch(config, tables, "cdc", lsn_from=start["lsn"], lsn_to=end["lsn"])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Batch)
        config = partition.config
        with _classified(config.url, "postgres source: cannot read"):
            conn = _connect(config.url)
            try:
                yield from _arrow_batches(_read_batch(conn, partition))
            finally:
                conn.close()

    def commit(self, end: dict) -> None:
        """Spark calls this once the batch ending at ``end`` is committed (every destination and the
        DLQ hold it): only now may PostgreSQL release the changes up to ``end``."""
        if end.get("phase") != "cdc":
            return
        with self._session(f"cannot acknowledge position {end['lsn']}") as conn:
            confirmed = _slot_position(conn, self.config.slot)
            if confirmed is None:
                raise _missing_slot(self.config)
            if lsn_to_int(end["lsn"]) > lsn_to_int(confirmed):
                conn.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.config.slot, end["lsn"])
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


def _arrow_batches(records: Iterator[tuple]) -> Iterator[pa.RecordBatch]:
    """Records as Arrow batches of ARROW_ROWS: Spark takes them without converting row by row."""
    while True:
        chunk = list(islice(records, ARROW_ROWS))
        if not chunk:
            return
        columns = list(zip(*chunk, strict=True))
        arrays = [pa.array(values, field.type) for values, field in zip(columns, _ARROW_SCHEMA, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)


def _max_of(conn: Any, table: Table, column: str) -> str | None:
    row = conn.execute(f"SELECT max({_ident(column)})::text FROM {table.qualified}").fetchone()
    return row[0] if row else None


def _read_batch(conn: Any, batch: _Batch) -> Iterator[tuple]:
    if batch.phase == "cdc":
        tables = {t.qualified: t for t in batch.tables}
        yield from read_changes(conn, batch.config, tables, batch.lsn_from, batch.lsn_to)
        return
    if batch.phase == "snapshot":
        table = batch.tables[batch.table]
        yield from _read_range(conn, table, "snapshot", batch.after, batch.upto, "snapshot")
        return
    for table, (after, upto) in zip(batch.tables, batch.poll, strict=True):
        if upto is not None and upto != after:
            yield from _read_range(conn, table, "create", after, upto, "poll")


def _read_range(
    conn: Any, table: Table, operation: str, after: str | None, upto: str | None, prefix: str
) -> Iterator[tuple]:
    """Rows with ``after < order <= upto`` in order, through a server-side cursor (bounded memory)."""
    col, cast = _ident(table.order), table.type_of(table.order)
    where, params = [f"{col} <= CAST(%s AS {cast})"], [upto]
    if after is not None:
        where.append(f"{col} > CAST(%s AS {cast})")
        params.append(after)
    names = [name for name, _ in table.columns]
    order_index = names.index(table.order)
    key_index = [names.index(k) for k in table.key]
    with conn.transaction(), conn.cursor(name="conduit_source_page") as cursor:
        cursor.itersize = 5000
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


class PostgresDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_postgres"

    def schema(self) -> str:
        from airflow_conduit.record import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return PostgresStreamReader(dict(self.options))


def read_stream(spark: SparkSession, settings: dict[str, Any], ctx: SourceContext) -> DataFrame:
    return read_python_source(spark, PostgresDataSource, settings, ctx)


__all__ = ["PostgresDataSource", "read_stream"]
