"""Change data capture for the ``builtin:postgres`` source: the ``test_decoding`` replication slot, and
the changes of whole transactions peeked from it (never consumed: the reader advances the slot only
after a batch committed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from airflow_conduit.engine.connectors.postgres.decoding import Change, lsn_to_int, parse_row, table_of
from airflow_conduit.engine.connectors.postgres.records import change_record
from airflow_conduit.engine.connectors.postgres.tables import Config, Table
from airflow_conduit.errors import Code, FatalError

PLUGIN_OPTIONS = ("skip-empty-xacts", "1")


def slot_position(conn: Any, slot: str) -> str | None:
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
    position = slot_position(conn, slot)
    if position is None:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
        position = slot_position(conn, slot)
    assert position is not None
    return position


def missing_slot(config: Config) -> FatalError:
    return FatalError(
        f"postgres source: replication slot {config.slot!r} does not exist any more, so changes since the "
        "last acknowledged position may be lost: start from a new checkpoint (snapshot again)",
        code=Code.SOURCE_FAILED,
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
    confirmed = slot_position(conn, config.slot)
    if confirmed is None:
        raise missing_slot(config)
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
