"""``builtin:postgres`` source: a snapshot of the tables, then change data capture.

**Snapshot** (``snapshotMode: initial``): each table in turn, in key order (the ``key`` setting, else the
table's single-column primary key), ``maxRecordsPerBatch`` rows per micro-batch, operation ``snapshot``.
The offset names the last key of the page (``{"phase": "snapshot", "table": i, "after": KEY, ...}``), and
``latestOffset`` fixes the page's end key, so a replayed batch reads the same key range.

**CDC, logical replication** (``cdcMode: logrepl``; ``auto`` means the same): as in Conduit, the
publication ``logrepl.publicationName`` (created for the tables unless it exists) and a ``pgoutput``
replication slot (``logrepl.slotName``; ``logrepl.plugin`` may choose ``test_decoding``, and an existing
slot keeps its plugin) are created *before* the snapshot is read, so no change committed
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
converted by type: integers and numerics as JSON numbers (digits kept; a numeric beyond Spark's 38
digits as a JSON string), booleans, json/jsonb as
documents, null; everything else as its PostgreSQL text. Unchanged TOASTed values, which the WAL does not
carry, are taken from the old row when it is there and left out otherwise. ``TRUNCATE`` is not turned
into records.

This module is the Spark stream reader and its offsets; the parts it calls: :mod:`.tables` (settings,
tables resolved), :mod:`.pages` (snapshot and polling pages), :mod:`.changes` (the slot and its
changes), :mod:`.records` (rows and changes as records, as Arrow), :mod:`.pgoutput` and :mod:`.decoding`
(the slot's messages decoded, binary and text).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_conduit.batch_log import SourceLag
from airflow_conduit.engine.connectors._stream import (
    SourceContext,
    parse_options,
    read_python_source,
    source_options,
    stop_requested,
)
from airflow_conduit.engine.connectors.postgres import _common
from airflow_conduit.engine.connectors.postgres.changes import (
    cdc_end,
    ensure_slot,
    missing_slot,
    read_changes,
    resolve_plugin,
    slot_position,
)
from airflow_conduit.engine.connectors.postgres.decoding import lsn_to_int
from airflow_conduit.engine.connectors.postgres.pages import max_of, page_end, read_range
from airflow_conduit.engine.connectors.postgres.records import arrow_batches
from airflow_conduit.engine.connectors.postgres.tables import Config, Table, resolve_tables
from airflow_conduit.errors import Code, ConduitError

if TYPE_CHECKING:  # the module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings import PostgresSourceSettings


def _classified(url: str, context: str) -> AbstractContextManager[None]:
    """psycopg errors as TransientError / FatalError (never with the password); ours pass through."""
    return _common.classified(url, context, Code.SOURCE_FAILED)


def _connect(url: str, autocommit: bool = True) -> Any:
    return _common.connect(url, code=Code.SOURCE_FAILED, autocommit=autocommit)


def snapshot_offset(table: int, after: str | None, lsn: str) -> dict:
    return {"phase": "snapshot", "table": table, "after": after, "lsn": lsn}


def cdc_offset(lsn: str) -> dict:
    return {"phase": "cdc", "lsn": lsn}


def poll_offset(last: list[str | None]) -> dict:
    return {"phase": "poll", "last": last}


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
        parsed = parse_options(options, Config)
        self.stop_file = parsed.stop_file
        self.config = parsed.config
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
        """The tables, and the output plugin the slot is read with (``auto`` decided once, here on the
        driver: the partitions carry the resolved config to the executors)."""
        if self._tables is None:
            if self.config.mode == "logrepl":  # also checks that a chosen plugin is the slot's
                self.config = replace(self.config, plugin=resolve_plugin(conn, self.config))
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
                return poll_offset([max_of(conn, t, t.order) for t in tables])
            if not create_slot:  # without the slot, snapshot pages can still be read; changes cannot
                position = slot_position(conn, self.config) or "0/0"
            else:
                # The slot first: every change committed after this point is kept for us.
                what = f"replication slot {config.slot!r}"
                if self.config.plugin == "pgoutput":
                    what = f"publication {config.publication!r} or " + what
                with _classified(
                    config.url,
                    f"postgres source: cannot create {what} (the user needs the REPLICATION attribute "
                    "and, for a publication, to own the tables; the server wal_level=logical; or use "
                    "cdcMode long_polling)",
                ):
                    position = ensure_slot(conn, self.config, tables)
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
            self._resolved(conn)
            confirmed = slot_position(conn, self.config)
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
                self._target = [max_of(conn, t, t.order) for t in self._resolved(conn)]
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
        try:
            return cdc_end(conn, self.config, tables, start, budget, upto)
        except Exception as error:
            if _common.sqlstate(error) == "42704":  # undefined_object: the slot is gone
                raise missing_slot(self.config) from None
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
                yield from arrow_batches(_read_batch(conn, partition))
            finally:
                conn.close()

    def commit(self, end: dict) -> None:
        """Spark calls this once the batch ending at ``end`` is committed (every destination and the
        DLQ hold it): only now may PostgreSQL release the changes up to ``end``."""
        if end.get("phase") != "cdc":
            return
        with self._session(f"cannot acknowledge position {end['lsn']}") as conn:
            self._resolved(conn)
            confirmed = slot_position(conn, self.config)
            if confirmed is None:
                raise missing_slot(self.config)
            if lsn_to_int(end["lsn"]) > lsn_to_int(confirmed):
                conn.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.config.slot, end["lsn"])
                )


def _read_batch(conn: Any, batch: _Batch) -> Iterator[tuple]:
    if batch.phase == "cdc":
        yield from read_changes(conn, batch.config, batch.tables, batch.lsn_from, batch.lsn_to)
        return
    if batch.phase == "snapshot":
        table = batch.tables[batch.table]
        yield from read_range(
            conn, table, "snapshot", batch.after, batch.upto, "snapshot", batch.config.fetch_size
        )
        return
    for table, (after, upto) in zip(batch.tables, batch.poll, strict=True):
        if upto is not None and upto != after:
            yield from read_range(conn, table, "create", after, upto, "poll")


class PostgresDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_postgres"

    def schema(self) -> str:
        from airflow_conduit.record import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return PostgresStreamReader(dict(self.options))


def read_stream(spark: SparkSession, settings: PostgresSourceSettings, ctx: SourceContext) -> DataFrame:
    return read_python_source(spark, PostgresDataSource, Config.from_settings(settings), ctx)


def stream_reader(settings: PostgresSourceSettings, ctx: SourceContext) -> PostgresStreamReader:
    """The stream reader as Spark builds it, for ``inspect`` in plain Python."""
    return PostgresStreamReader(source_options(Config.from_settings(settings), ctx))


class SlotLag:
    """The replication slot's lag once a batch is acknowledged: WAL bytes from the batch's end LSN to
    the server's current one (``pg_current_wal_lsn() - confirmed_flush_lsn`` after ``commit``
    advanced the slot to that LSN; asked before Spark's commit, so the slot's own position would still
    count the batch just written). During the snapshot, the WAL kept since the slot was created.
    Long polling has no slot: no lag. One small query per batch, on a connection kept for the run."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._conn: Any = None

    def lag(self, end: Any) -> SourceLag | None:
        if not isinstance(end, dict) or end.get("phase") not in ("snapshot", "cdc"):
            return None
        try:
            if self._conn is None or self._conn.closed:
                self._conn = _connect(self.config.url)
            row = self._conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (end["lsn"],)
            ).fetchone()
        except BaseException:
            self.close()  # a fresh connection next time
            raise
        return SourceLag(max(0.0, float(row[0])), "WAL bytes")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def lag_reader(settings: PostgresSourceSettings, ctx: SourceContext) -> SlotLag:
    return SlotLag(Config.from_settings(settings))


__all__ = ["PostgresDataSource", "read_stream"]
