"""The ``pgoutput`` decoder: messages built here byte by byte from PostgreSQL's "Logical Replication
Message Formats" (protocol version 1), and messages captured from a PostgreSQL 15 server
(``pg_logical_slot_peek_binary_changes(..., 'proto_version', '1', 'publication_names', 'pub')``)."""

from __future__ import annotations

import json
import struct

import pytest

from airflow_conduit.engine.connectors.postgres.decoding import ParseError
from airflow_conduit.engine.connectors.postgres.pgoutput import (
    Begin,
    Commit,
    Decoder,
    Other,
    Relation,
    RowChange,
    Truncate,
    parse_message,
    relation_of,
)
from airflow_conduit.engine.connectors.postgres.records import change_record
from airflow_conduit.engine.connectors.postgres.tables import Table

# Built from the protocol docs ----------------------------------------------------------------------


def s(text: str) -> bytes:
    return text.encode() + b"\0"


def tuple_data(*values: str | None | bool) -> bytes:
    """TupleData: None is 'n' (null), True is 'u' (unchanged TOAST), text is 't' with its length."""
    out = struct.pack("!h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is True:
            out += b"u"
        else:
            raw = str(value).encode()
            out += b"t" + struct.pack("!i", len(raw)) + raw
    return out


def relation(oid: int, namespace: str, name: str, identity: str, *columns: tuple[str, int, bool]) -> bytes:
    out = b"R" + struct.pack("!I", oid) + s(namespace) + s(name) + identity.encode()
    out += struct.pack("!h", len(columns))
    for column, type_oid, key in columns:
        out += struct.pack("!B", 1 if key else 0) + s(column) + struct.pack("!Ii", type_oid, -1)
    return out


ORDERS = relation(
    16384, "public", "orders", "d", ("id", 23, True), ("total", 1700, False), ("note", 25, False)
)


def test_begin_and_commit() -> None:
    begin = b"B" + struct.pack("!QqI", 0x1_0000_00A0, 777_000_000, 731)
    assert parse_message(begin) == Begin(final_lsn=0x1_0000_00A0, xid=731)
    commit = b"C" + struct.pack("!BQQq", 0, 0x1_0000_00A0, 0x1_0000_00D0, 777_000_000)
    assert parse_message(commit) == Commit(commit_lsn=0x1_0000_00A0, end_lsn=0x1_0000_00D0)


def test_relation() -> None:
    message = parse_message(ORDERS)
    assert message == Relation(
        16384,
        "public",
        "orders",
        "d",
        (("id", 23, True), ("total", 1700, False), ("note", 25, False)),
    )


def test_insert_update_delete_decoded_with_their_relation() -> None:
    decoder = Decoder()
    decoder.feed(ORDERS)
    insert = decoder.feed(b"I" + struct.pack("!I", 16384) + b"N" + tuple_data("1", "12.50", None))
    assert isinstance(insert, RowChange)
    change = decoder.change(insert)
    assert change.action == "INSERT" and change.old is None and change.new is not None
    assert [(c.name, c.type, c.text) for c in change.new] == [
        ("id", "integer", "1"),
        ("total", "numeric", "12.50"),
        ("note", "text", None),
    ]
    # UPDATE without an old tuple (default replica identity, key unchanged)
    update = decoder.feed(b"U" + struct.pack("!I", 16384) + b"N" + tuple_data("1", "13", "x"))
    assert isinstance(update, RowChange)
    assert decoder.change(update).old is None
    # UPDATE that changed the key: 'K' old tuple, non-key columns sent as null and left out
    moved = (
        b"U"
        + struct.pack("!I", 16384)
        + b"K"
        + tuple_data("1", None, None)
        + b"N"
        + tuple_data("2", "13", "x")
    )
    change = decoder.change(decoder.feed(moved))  # type: ignore[arg-type]
    assert [(c.name, c.text) for c in change.old or ()] == [("id", "1")]
    assert [(c.name, c.text) for c in change.new or ()] == [("id", "2"), ("total", "13"), ("note", "x")]
    # DELETE with the whole old row ('O', REPLICA IDENTITY FULL): nulls are real nulls
    delete = b"D" + struct.pack("!I", 16384) + b"O" + tuple_data("2", "13", None)
    change = decoder.change(decoder.feed(delete))  # type: ignore[arg-type]
    assert change.action == "DELETE" and change.new is None
    assert [(c.name, c.text) for c in change.old or ()] == [("id", "2"), ("total", "13"), ("note", None)]


def test_unchanged_toast_value() -> None:
    decoder = Decoder()
    decoder.feed(ORDERS)
    update = decoder.feed(b"U" + struct.pack("!I", 16384) + b"N" + tuple_data("1", "5", True))
    change = decoder.change(update)  # type: ignore[arg-type]
    note = (change.new or ())[2]
    assert note.toasted and note.text is None


def test_truncate_and_other_messages() -> None:
    truncate = b"T" + struct.pack("!iB", 2, 1) + struct.pack("!II", 16384, 16390)
    assert parse_message(truncate) == Truncate((16384, 16390))
    origin = b"O" + struct.pack("!Q", 5) + s("node1")
    assert parse_message(origin) == Other("O")


def test_relation_of_reads_the_oid_without_decoding() -> None:
    assert relation_of(b"I" + struct.pack("!I", 16384) + b"N" + tuple_data("1", None, None)) == 16384
    assert relation_of(ORDERS) is None


def test_change_before_its_relation_and_truncated_bytes_are_errors() -> None:
    message = parse_message(b"I" + struct.pack("!I", 99) + b"N" + tuple_data("1"))
    with pytest.raises(ParseError, match="before its Relation"):
        Decoder().change(message)  # type: ignore[arg-type]
    with pytest.raises(ParseError, match="ends early"):
        parse_message(b"B\x00\x00")
    with pytest.raises(ParseError, match="expected 'N'"):
        parse_message(b"I" + struct.pack("!I", 99) + b"X")


# Captured from PostgreSQL 15 -----------------------------------------------------------------------
# CREATE TABLE t (id int PRIMARY KEY, big bigint, num numeric, txt text, ok bool, at timestamp,
#                 doc jsonb, note text); ALTER TABLE t REPLICA IDENTITY FULL;
# CREATE TABLE k (id int PRIMARY KEY, v text); CREATE PUBLICATION pub FOR TABLE t, k;
# INSERT INTO t VALUES (1, 9007199254740993, 12.50, 'it''s', true, '2024-01-02 03:04:05',
#                       '{"a": [1, 2]}', NULL); UPDATE t SET txt = 'new' WHERE id = 1;
# INSERT INTO k VALUES (7, 'x'); DELETE FROM k WHERE id = 7; TRUNCATE k

_ROW = (
    b"t\x00\x00\x00\x011t\x00\x00\x00\x109007199254740993t\x00\x00\x00\x0512.50t\x00\x00\x00\x04it's"
    b't\x00\x00\x00\x01tt\x00\x00\x00\x132024-01-02 03:04:05t\x00\x00\x00\r{"a": [1, 2]}n'
)
_NEW_ROW = _ROW.replace(b"t\x00\x00\x00\x04it's", b"t\x00\x00\x00\x03new")
CAPTURED_T = [
    b"B\x00\x00\x00\x00\x01P\xb8(\x00\x03\x04\r\x12U\xee\xea\x00\x00\x02\xda",
    b"R\x00\x00@\x01public\x00t\x00f\x00\x08\x01id\x00\x00\x00\x00\x17\xff\xff\xff\xff\x01big\x00\x00\x00"
    b"\x00\x14\xff\xff\xff\xff\x01num\x00\x00\x00\x06\xa4\xff\xff\xff\xff\x01txt\x00\x00\x00\x00\x19\xff"
    b"\xff\xff\xff\x01ok\x00\x00\x00\x00\x10\xff\xff\xff\xff\x01at\x00\x00\x00\x04Z\xff\xff\xff\xff\x01doc"
    b"\x00\x00\x00\x0e\xda\xff\xff\xff\xff\x01note\x00\x00\x00\x00\x19\xff\xff\xff\xff",
    b"I\x00\x00@\x01N\x00\x08" + _ROW,
    b"C\x00\x00\x00\x00\x00\x01P\xb8(\x00\x00\x00\x00\x01P\xb8X\x00\x03\x04\r\x12U\xee\xea",
    b"U\x00\x00@\x01O\x00\x08" + _ROW + b"N\x00\x08" + _NEW_ROW,
]
CAPTURED_K = [
    b"R\x00\x00@\x08public\x00k\x00d\x00\x02\x01id\x00\x00\x00\x00\x17\xff\xff\xff\xff\x00v\x00\x00\x00"
    b"\x00\x19\xff\xff\xff\xff",
    b"I\x00\x00@\x08N\x00\x02t\x00\x00\x00\x017t\x00\x00\x00\x01x",
    b"D\x00\x00@\x08K\x00\x02t\x00\x00\x00\x017n",
    b"T\x00\x00\x00\x01\x00\x00\x00@\x08",
]

T = Table(
    "t",
    "public.t",
    (
        ("id", "integer"),
        ("big", "bigint"),
        ("num", "numeric"),
        ("txt", "text"),
        ("ok", "boolean"),
        ("at", "timestamp without time zone"),
        ("doc", "jsonb"),
        ("note", "text"),
    ),
    ("id",),
    "id",
    oid=16385,
)
K = Table("k", "public.k", (("id", "integer"), ("v", "text")), ("id",), "id", oid=16392)


def _records(table: Table, messages: list[bytes]) -> list[dict]:
    decoder, out = Decoder(), []
    for data in messages:
        message = decoder.feed(data)
        if isinstance(message, RowChange):
            record = change_record(table, decoder.change(message), "0/0:0")
            assert record is not None
            _, operation, metadata, key, _, before, _, after, _ = record
            out.append(
                {
                    "operation": operation,
                    "collection": metadata["opencdc.collection"],
                    "key": json.loads(key) if key else None,
                    "before": json.loads(before) if before else None,
                    "after": json.loads(after) if after else None,
                }
            )
    return out


def test_captured_messages_parse() -> None:
    begin, rel, _, commit, _ = (parse_message(m) for m in CAPTURED_T)
    assert isinstance(begin, Begin) and isinstance(commit, Commit)
    assert begin.final_lsn == commit.commit_lsn == 0x1_50B8_28
    assert commit.end_lsn == 0x1_50B8_58
    assert isinstance(rel, Relation) and (rel.oid, rel.name, rel.replica_identity) == (16385, "t", "f")
    assert [c[0] for c in rel.columns] == [name for name, _ in T.columns]
    assert parse_message(CAPTURED_K[-1]) == Truncate((16392,))


def test_captured_changes_as_records_with_types() -> None:
    row = {
        "id": 1,
        "big": 9007199254740993,  # beyond a double's exact integers: kept exactly
        "num": 12.5,
        "txt": "it's",
        "ok": True,
        "at": "2024-01-02 03:04:05",
        "doc": {"a": [1, 2]},
        "note": None,
    }
    insert, update = _records(T, CAPTURED_T)
    assert insert == {
        "operation": "create",
        "collection": "t",
        "key": {"id": 1},
        "before": None,
        "after": row,
    }
    assert update["operation"] == "update" and update["key"] == {"id": 1}
    assert update["before"] == row  # REPLICA IDENTITY FULL: the whole old row
    assert update["after"] == {**row, "txt": "new"}


def test_captured_default_identity_delete_has_only_the_key() -> None:
    insert, delete = _records(K, CAPTURED_K)
    assert insert["after"] == {"id": 7, "v": "x"}
    assert delete == {
        "operation": "delete",
        "collection": "k",
        "key": {"id": 7},
        "before": {"id": 7},
        "after": None,
    }


# The slot's rows, pgoutput, read through changes.py with a stand-in connection ---------------------


class _Result:
    def __init__(self, rows: list) -> None:
        self.rows = rows

    def fetchall(self) -> list:
        return self.rows

    def fetchone(self) -> object:
        return self.rows[0] if self.rows else None


class _Conn:
    """Answers the slot query with a pgoutput slot at ``confirmed``, and peeks with ``rows``."""

    def __init__(self, rows: list[tuple[str, bytes]], confirmed: str = "0/10") -> None:
        self.rows, self.confirmed, self.peeks = rows, confirmed, []

    def execute(self, query: str, params: tuple = ()) -> _Result:
        if "pg_replication_slots" in query:
            return _Result([(self.confirmed, "pgoutput")])
        assert "pg_logical_slot_peek_binary_changes" in query and "'proto_version', '1'" in query
        self.peeks.append(params)
        upto, limit = params[1], params[2]
        rows = [r for r in self.rows if upto is None or _lsn(r[0]) <= _lsn(upto)]
        return _Result(rows if limit is None else rows[:limit])

    def cursor(self) -> _Conn:
        return self

    def stream(self, query: str, params: tuple) -> list:
        return self.execute(query, params).fetchall()


def _lsn(text: str) -> int:
    from airflow_conduit.engine.connectors.postgres.decoding import lsn_to_int

    return lsn_to_int(text)


def _txn(commit: str, *changes: bytes) -> list[tuple[str, bytes]]:
    begin = b"B" + struct.pack("!QqI", _lsn(commit), 0, 1)
    end = b"C" + struct.pack("!BQQq", 0, _lsn(commit), _lsn(commit) + 8, 0)
    return [(commit, begin), *((commit, c) for c in changes), (commit, end)]


def _insert(oid: int, *values: str) -> bytes:
    return b"I" + struct.pack("!I", oid) + b"N" + tuple_data(*values)


ORDERS_TABLE = Table(
    "orders",
    "public.orders",
    (("id", "integer"), ("total", "numeric"), ("note", "text")),
    ("id",),
    "id",
    16384,
)
OTHER = relation(16999, "public", "other", "d", ("id", 23, True))


def _config() -> object:
    from airflow_conduit.engine.connectors.postgres.tables import Config

    return Config(
        url="postgresql://u:p@h/d",
        tables=("orders",),
        key="",
        snapshot=False,
        mode="logrepl",
        slot="s",
        ordering_column="",
        poll_interval=1.0,
        max_records=2,
        publication="Pub",
        plugin="pgoutput",
    )


SLOT_ROWS = (
    # confirmed already: skipped, but its Relation message is what decodes the later changes
    _txn("0/10", ORDERS, _insert(16384, "1", "1", None))
    + _txn("0/20", OTHER, b"I" + struct.pack("!I", 16999) + b"N" + tuple_data("9"))  # another table
    + _txn("0/30", _insert(16384, "2", "2", "x"), _insert(16384, "3", "3", None))
    + _txn("0/40", _insert(16384, "4", "4", None))
)


def test_batch_ends_after_whole_transactions_of_the_budget() -> None:
    from airflow_conduit.engine.connectors.postgres.changes import cdc_end

    conn = _Conn(SLOT_ROWS)
    end = cdc_end(conn, _config(), (ORDERS_TABLE,), "0/10", 2, None)  # type: ignore[arg-type]
    assert end == "0/30"  # the other table's transaction rides along; 2 changes of ours reach the budget
    assert conn.peeks[0][3] == '"Pub"'  # publication_names: the name quoted, its case kept
    assert cdc_end(_Conn(SLOT_ROWS), _config(), (ORDERS_TABLE,), "0/40", 2, None) is None  # type: ignore[arg-type]


def test_read_changes_yields_the_batch_transactions_only() -> None:
    from airflow_conduit.engine.connectors.postgres.changes import read_changes

    records = list(read_changes(_Conn(SLOT_ROWS), _config(), (ORDERS_TABLE,), "0/10", "0/30"))  # type: ignore[arg-type]
    assert [(r[0], r[1], json.loads(r[3])) for r in records] == [
        (b"0/30:0", "create", {"id": 2}),
        (b"0/30:1", "create", {"id": 3}),
    ]
    assert json.loads(records[0][7]) == {"id": 2, "total": 2, "note": "x"}
