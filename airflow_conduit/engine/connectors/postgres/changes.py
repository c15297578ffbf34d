"""Change data capture for the ``builtin:postgres`` source: the replication slot (``pgoutput`` with a
publication, as Conduit, or ``test_decoding``), and the changes of whole transactions peeked from it
(never consumed: the reader advances the slot only after a batch committed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from airflow_conduit.engine.connectors.postgres import _common
from airflow_conduit.engine.connectors.postgres.decoding import Change, lsn_to_int, parse_row, table_of
from airflow_conduit.engine.connectors.postgres.pgoutput import Decoder, RowChange, relation_of
from airflow_conduit.engine.connectors.postgres.records import change_record
from airflow_conduit.engine.connectors.postgres.tables import Config, Table, ident
from airflow_conduit.errors import Code, FatalError

PGOUTPUT, TEST_DECODING = "pgoutput", "test_decoding"
PLUGINS = (PGOUTPUT, TEST_DECODING)


def _slot(conn: Any, slot: str) -> tuple[str, str] | None:
    """The slot's ``(confirmed_flush_lsn, plugin)``, or None when it does not exist (in this database)."""
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text, plugin FROM pg_replication_slots "
        "WHERE slot_name = %s AND database = current_database()",
        (slot,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _wrong_plugin(slot: str, found: str, wanted: str) -> FatalError:
    return FatalError(
        f"postgres source: replication slot {slot!r} uses plugin {found!r}, not {wanted}: drop it, "
        "choose another `logrepl.slotName`"
        + (", or set `logrepl.plugin` to the slot's plugin" if found in PLUGINS else ""),
        code=Code.SOURCE_FAILED,
    )


def resolve_plugin(conn: Any, config: Config) -> str:
    """The output plugin to read with: ``logrepl.plugin`` when set; else the existing slot's (a
    pipeline whose slot was made with ``test_decoding`` by an earlier release keeps working), and
    ``pgoutput``, Conduit's, for a new slot."""
    found = _slot(conn, config.slot)
    if config.plugin in PLUGINS:
        if found is not None and found[1] != config.plugin:
            raise _wrong_plugin(config.slot, found[1], config.plugin)
        return config.plugin
    if found is None:
        return PGOUTPUT
    if found[1] not in PLUGINS:
        raise _wrong_plugin(config.slot, found[1], " or ".join(PLUGINS))
    return found[1]


def slot_position(conn: Any, config: Config) -> str | None:
    """The slot's confirmed_flush_lsn, or None when it does not exist (in this database)."""
    found = _slot(conn, config.slot)
    if found is None:
        return None
    if config.plugin in PLUGINS and found[1] != config.plugin:
        raise _wrong_plugin(config.slot, found[1], config.plugin)
    return found[0]


def ensure_publication(conn: Any, config: Config, tables: tuple[Table, ...]) -> None:
    """As Conduit: ``CREATE PUBLICATION name FOR TABLE ...`` unless one of that name exists. An existing
    one must publish every configured table, or their changes would never reach the slot."""
    if not tables:
        raise FatalError(
            f"postgres source: publication {config.publication!r} needs at least one table",
            code=Code.SOURCE_FAILED,
        )
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (config.publication,)).fetchone()
    if exists is None:
        try:
            conn.execute(
                f"CREATE PUBLICATION {ident(config.publication)} FOR TABLE "
                + ", ".join(t.qualified for t in tables)
            )
            return
        except Exception as error:
            state = _common.sqlstate(error)
            if state == "42501":  # insufficient_privilege: only the tables' owner may publish them
                raise FatalError(
                    f"postgres source: cannot create publication {config.publication!r}: {error}. Create "
                    f"it as the tables' owner (CREATE PUBLICATION {ident(config.publication)} FOR TABLE "
                    f"{', '.join(t.qualified for t in tables)}) and this source uses it",
                    code=Code.SOURCE_FAILED,
                ) from None
            if state != "42710":  # duplicate_object: made meanwhile by another run
                raise
    published = {
        row[0]
        for row in conn.execute(
            "SELECT (quote_ident(schemaname) || '.' || quote_ident(tablename)) FROM pg_publication_tables "
            "WHERE pubname = %s",
            (config.publication,),
        ).fetchall()
    }
    missing = [t.name for t in tables if t.qualified not in published]
    if missing:
        raise FatalError(
            f"postgres source: publication {config.publication!r} exists but does not publish "
            f"{', '.join(missing)}: add them (ALTER PUBLICATION ... ADD TABLE) or choose another "
            "`logrepl.publicationName`",
            code=Code.SOURCE_FAILED,
        )


def ensure_slot(conn: Any, config: Config, tables: tuple[Table, ...]) -> str:
    """Create the logical replication slot unless it exists (with ``pgoutput``, the publication first:
    the plugin looks it up as of each change, so it must be older than the slot); its confirmed
    position."""
    position = slot_position(conn, config)
    if position is None:
        # Said first: a user without it would otherwise hear only of the publication.
        role, allowed = conn.execute(
            "SELECT rolname::text, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if not allowed:
            raise FatalError(
                f"postgres source: cannot create replication slot {config.slot!r}: user {role!r} lacks the "
                f"REPLICATION attribute (ALTER ROLE {ident(role)} REPLICATION), or use cdcMode long_polling",
                code=Code.SOURCE_FAILED,
            )
    if config.plugin == PGOUTPUT:
        ensure_publication(conn, config, tables)
    if position is None:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (config.slot, config.plugin))
        position = slot_position(conn, config)
    assert position is not None
    return position


def missing_slot(config: Config) -> FatalError:
    return FatalError(
        f"postgres source: replication slot {config.slot!r} does not exist any more, so changes since the "
        "last acknowledged position may be lost: start from a new checkpoint (snapshot again)",
        code=Code.SOURCE_FAILED,
    )


def _peek_query(config: Config, upto: str | None, nchanges: int | None) -> tuple[str, tuple]:
    if config.plugin == PGOUTPUT:
        # publication_names is a list of identifiers: quoted, the name is taken as it is.
        return (
            "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, "
            "'proto_version', '1', 'publication_names', %s)",
            (config.slot, upto, nchanges, ident(config.publication)),
        )
    return (
        "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, %s::pg_lsn, %s, "
        "'skip-empty-xacts', '1')",
        (config.slot, upto, nchanges),
    )


class _Rows:
    """The rows of one peek, whatever the plugin: each is a change (of one of our tables, or not), a
    commit, or something else. With ``pgoutput`` the Relation messages are kept as they pass."""

    def __init__(self, config: Config, tables: tuple[Table, ...]) -> None:
        self.pgoutput = config.plugin == PGOUTPUT
        self.by_name = {t.qualified: t for t in tables}
        self.by_oid = {t.oid: t for t in tables}
        self.decoder = Decoder()

    def classify(self, data: Any) -> tuple[str, Table | None]:
        if self.pgoutput:
            kind = data[0:1]
            if kind == b"R":
                self.decoder.feed(bytes(data))
            elif kind == b"C":
                return "commit", None
            elif kind in (b"I", b"U", b"D"):
                return "change", self.by_oid.get(relation_of(data) or 0)
            return "other", None
        if data.startswith("table "):
            return "change", self.by_name.get(table_of(data) or "")
        return ("commit", None) if data.startswith("COMMIT") else ("other", None)

    def change(self, data: Any) -> Change:
        if self.pgoutput:
            message = self.decoder.feed(bytes(data))
            assert isinstance(message, RowChange)
            return self.decoder.change(message)
        change = parse_row(data)
        assert isinstance(change, Change)
        return change


def cdc_end(
    conn: Any, config: Config, tables: tuple[Table, ...], start: str, budget: int, upto: str | None
) -> str | None:
    """The commit LSN that ends the next batch after ``start``: whole transactions holding about
    ``budget`` changes of the tables. Transactions touching none of them are included behind relevant
    ones, or on their own once there are ``budget`` of their changes, so the slot can move past
    unrelated traffic without an empty batch on every poll."""
    begin = lsn_to_int(start)
    nchanges = budget + 2
    while True:
        rows = conn.execute(*_peek_query(config, upto, nchanges)).fetchall()
        classified = _Rows(config, tables)
        relevant = unrelated = pending_relevant = pending_unrelated = commits = 0
        last: str | None = None
        for lsn, data in rows:
            kind, table = classified.classify(data)
            if kind == "change":
                pending_relevant += table is not None
                pending_unrelated += table is None
            elif kind == "commit":
                if lsn_to_int(lsn) > begin:
                    commits += 1
                    relevant += pending_relevant
                    unrelated += pending_unrelated
                    last = lsn
                    if relevant >= budget:
                        return last
                pending_relevant = pending_unrelated = 0
        if len(rows) < nchanges:  # the end of what is there (peek returns at least nchanges otherwise)
            # pgoutput sends no changes of tables outside the publication, only their (empty)
            # transactions' Begin and Commit: those count too, or the slot would never move past them.
            empty = commits if classified.pgoutput else 0
            return last if (relevant or unrelated + empty >= budget) else None
        nchanges *= 2  # transactions at or before `start`, or unrelated ones, used up the budget


def read_changes(
    conn: Any, config: Config, tables: tuple[Table, ...], start: str, end: str
) -> Iterator[tuple]:
    """The records of the transactions that committed in ``(start, end]``, in commit order."""
    if lsn_to_int(end) <= lsn_to_int(start):
        return  # the batch that ends the snapshot may hold no change
    confirmed = slot_position(conn, config)
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
    rows = _Rows(config, tables)
    query, params = _peek_query(config, end, None)
    for lsn, data in conn.cursor().stream(query, params):
        kind, table = rows.classify(data)
        if kind == "change":
            if table is not None:
                # Decoded now: a later Relation message (ALTER TABLE in the transaction) may redefine it.
                pending.append((table, rows.change(data)))
            continue
        if kind != "commit":
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
