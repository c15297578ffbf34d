"""A decoder for the messages of PostgreSQL's ``pgoutput`` plugin (logical replication protocol,
version 1), as ``pg_logical_slot_peek_binary_changes`` returns them: one message per row.

Pure Python, no database. The formats ("Logical Replication Message Formats" in PostgreSQL's docs);
integers are big-endian, strings NUL-terminated::

    B  Int64 final LSN, Int64 commit time (µs since 2000-01-01), Int32 xid
    C  Int8 flags, Int64 commit LSN, Int64 end LSN, Int64 commit time
    R  Int32 relation oid, String namespace, String name, Int8 replica identity, Int16 ncols,
       ncols x (Int8 flags (1: part of the key), String name, Int32 type oid, Int32 typmod)
    I  Int32 oid, 'N' TupleData
    U  Int32 oid, ['K' | 'O' TupleData], 'N' TupleData
    D  Int32 oid, 'K' | 'O' TupleData
    T  Int32 nrelations, Int8 options, nrelations x Int32 oid
    TupleData: Int16 ncols, ncols x ('n' null | 'u' unchanged TOAST | 't' Int32 length, bytes of text)

``K`` is the old row's replica identity (the key; the other columns come as nulls and are left out
here), ``O`` the whole old row (``REPLICA IDENTITY FULL``). A Relation message precedes the first
change of a relation in each decoding session, so a :class:`Decoder` keeps them across rows.
Values are the types' text output, the same text ``test_decoding`` prints: they become
:class:`~.decoding.Column` values, converted to JSON by the same rules.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from airflow_conduit.engine.connectors.postgres.decoding import Change, Column, ParseError

# Type OIDs (pg_type.dat) of the types :func:`~.decoding.json_fragment` converts specially, by the
# names format_type gives them; every other type's text is a JSON string, whatever its name.
TYPE_NAMES = {
    16: "boolean",
    20: "bigint",
    21: "smallint",
    23: "integer",
    26: "oid",
    114: "json",
    700: "real",
    701: "double precision",
    1700: "numeric",
    3802: "jsonb",
}


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str
    """``d`` default (the primary key), ``f`` full, ``i`` an index, ``n`` nothing."""
    columns: tuple[tuple[str, int, bool], ...]
    """``(name, type oid, part of the key)`` in table order."""


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int


@dataclass(frozen=True)
class RowChange:
    """An Insert, Update or Delete of relation ``oid``; tuples are raw until decoded with its Relation."""

    action: str
    """``INSERT``, ``UPDATE`` or ``DELETE``."""
    oid: int
    new: tuple[bytes | None | bool, ...] | None
    old: tuple[bytes | None | bool, ...] | None
    old_kind: str | None
    """``K`` (key columns only) or ``O`` (the whole old row); None without an old tuple."""


@dataclass(frozen=True)
class Truncate:
    oids: tuple[int, ...]


@dataclass(frozen=True)
class Other:
    kind: str
    """The message byte of a message this source does not use (Origin, Type, Message, ...)."""


Message = Begin | Commit | Relation | RowChange | Truncate | Other

UNCHANGED = True
"""A TupleData value: an unchanged TOASTed column (not in the WAL record); None is SQL NULL."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ParseError(f"pgoutput message ends early at byte {self.pos} (wanted {size} more)")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def byte(self) -> str:
        return chr(self.take("!B"))

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ParseError(f"pgoutput string at byte {self.pos} is not terminated")
        text = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return text

    def tuple_data(self) -> tuple[bytes | None | bool, ...]:
        values: list[bytes | None | bool] = []
        for _ in range(self.take("!h")):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind in ("t", "b"):
                length = self.take("!i")
                values.append(self.data[self.pos : self.pos + length])
                self.pos += length
            else:
                raise ParseError(f"pgoutput tuple value of unknown kind {kind!r}")
        return tuple(values)


def parse_message(data: bytes) -> Message:
    """One ``data`` value of ``pg_logical_slot_peek_binary_changes`` with ``pgoutput``."""
    if not data:
        raise ParseError("empty pgoutput message")
    r = _Reader(bytes(data))
    kind = r.byte()
    if kind == "B":
        final_lsn = r.take("!Q")
        r.take("!q")  # commit time
        return Begin(final_lsn, r.take("!I"))
    if kind == "C":
        r.take("!B")  # flags, unused
        return Commit(r.take("!Q"), r.take("!Q"))
    if kind == "R":
        oid, namespace, name = r.take("!I"), r.string(), r.string()
        identity = r.byte()
        columns = []
        for _ in range(r.take("!h")):
            flags = r.take("!B")
            column = r.string()
            type_oid = r.take("!I")
            r.take("!i")  # typmod
            columns.append((column, type_oid, bool(flags & 1)))
        return Relation(oid, namespace, name, identity, tuple(columns))
    if kind in ("I", "U", "D"):
        oid = r.take("!I")
        marker = r.byte()
        old = old_kind = None
        if kind != "I" and marker in ("K", "O"):
            old_kind, old = marker, r.tuple_data()
            if kind == "D":
                return RowChange("DELETE", oid, None, old, old_kind)
            marker = r.byte()
        if marker != "N":
            raise ParseError(f"pgoutput {kind} message: expected 'N', got {marker!r}")
        action = "INSERT" if kind == "I" else "UPDATE"
        return RowChange(action, oid, r.tuple_data(), old, old_kind)
    if kind == "T":
        count = r.take("!i")
        r.take("!B")  # options: CASCADE, RESTART IDENTITY
        return Truncate(tuple(r.take("!I") for _ in range(count)))
    return Other(kind)


def relation_of(data: bytes) -> int | None:
    """The relation oid of an Insert/Update/Delete message, cheaply; None for other messages."""
    if len(data) >= 5 and data[0] in b"IUD":
        return int.from_bytes(data[1:5], "big")
    return None


class Decoder:
    """Messages of one decoding session in order: keeps the Relation messages, and turns row changes
    into :class:`~.decoding.Change` values (columns named and typed by their relation)."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}

    def feed(self, data: bytes) -> Message:
        message = parse_message(data)
        if isinstance(message, Relation):
            self.relations[message.oid] = message
        return message

    def change(self, message: RowChange) -> Change:
        relation = self.relations.get(message.oid)
        if relation is None:
            raise ParseError(f"pgoutput change of relation {message.oid} before its Relation message")
        new = None if message.new is None else _columns(relation, message.new, key_only=False)
        old = None
        if message.old is not None:
            old = _columns(relation, message.old, key_only=message.old_kind == "K")
        return Change(f"{relation.namespace}.{relation.name}", message.action, new=new, old=old)


def _columns(
    relation: Relation, values: tuple[bytes | None | bool, ...], key_only: bool
) -> tuple[Column, ...]:
    if len(values) != len(relation.columns):
        raise ParseError(
            f"pgoutput tuple of {len(values)} columns for relation {relation.name!r} of {len(relation.columns)}"
        )
    columns = []
    for (name, type_oid, is_key), value in zip(relation.columns, values, strict=True):
        if key_only and not is_key:
            continue  # not in the replica identity: sent as null, but its value is unknown
        type_name = TYPE_NAMES.get(type_oid, "text")
        if value is UNCHANGED:
            columns.append(Column(name, type_name, None, toasted=True))
        elif value is None or isinstance(value, bool):
            columns.append(Column(name, type_name, None))
        else:
            columns.append(Column(name, type_name, value.decode("utf-8")))
    return tuple(columns)
