"""A parser for the text that PostgreSQL's ``test_decoding`` output plugin writes, and LSN helpers.

Pure Python, no database: the source reads rows of ``pg_logical_slot_peek_changes`` and hands their
``data`` column here. The format (``contrib/test_decoding``)::

    BEGIN 730
    table public.x: INSERT: id[integer]:2 v[text]:'b''q' j[jsonb]:'{"a": 1}' n[numeric]:1.5 b[boolean]:true
    table public.x: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:5 v[text]:null
    table public.x: DELETE: id[integer]:2
    table public.x: TRUNCATE: (no-flags)
    COMMIT 730

Identifiers that need it are double-quoted (``"Odd Col"[character varying]:'x'``); text values are
single-quoted with ``''`` for a quote and may hold spaces and newlines; numbers, booleans and ``null``
come bare; an unchanged TOASTed column of an UPDATE comes as ``unchanged-toast-datum`` (its value is not
in the WAL record). Old tuples (``old-key:``, and DELETE's tuple) leave out null columns.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

UNCHANGED_TOAST = "unchanged-toast-datum"

_INTEGER_TYPES = frozenset({"smallint", "integer", "bigint", "oid"})
_DECIMAL_TYPES = frozenset({"numeric", "real", "double precision"})
_JSON_TYPES = frozenset({"json", "jsonb"})
_NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")


class ParseError(ValueError):
    """A line that is not in the format above (another output plugin, or a format change)."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    """The type as ``format_type_be`` prints it: ``integer``, ``character varying``, ``integer[]``."""
    text: str | None
    """The value as the type's output function wrote it; ``None`` for SQL NULL."""
    toasted: bool = False
    """An unchanged TOASTed value the WAL record does not carry: the value is unknown, not null."""

    def json(self) -> str:
        """The value as a JSON fragment: integers, numerics and floats as JSON numbers (exactly as
        PostgreSQL printed them, so no precision is lost), booleans, json/jsonb as the document itself,
        null; anything else (NaN, the infinities, a numeric that Spark cannot keep exactly) as a JSON
        string of its text."""
        return json_fragment(self.type, self.text)

    def value(self) -> Any:
        """The value as Python data (what :meth:`json` decodes to)."""
        return json.loads(self.json())


@dataclass(frozen=True)
class Change:
    table: str
    """Schema-qualified, quoted where PostgreSQL quotes it: ``public.x``, ``public."My Table"``."""
    action: str
    """``INSERT``, ``UPDATE``, ``DELETE`` or ``TRUNCATE``."""
    new: tuple[Column, ...] | None = None
    """INSERT's row, UPDATE's new row."""
    old: tuple[Column, ...] | None = None
    """DELETE's row (the replica identity; all non-null columns under REPLICA IDENTITY FULL), UPDATE's
    ``old-key`` (under REPLICA IDENTITY FULL, or when the key changed)."""


@dataclass(frozen=True)
class Begin:
    xid: int | None


@dataclass(frozen=True)
class Commit:
    xid: int | None


@dataclass(frozen=True)
class Other:
    """Rows this source does not turn into records (``message:`` rows of pg_logical_emit_message)."""

    text: str


Row = Begin | Commit | Change | Other


def json_fragment(type_name: str, text: str | None) -> str:
    if text is None:
        return "null"
    if type_name in _INTEGER_TYPES or type_name in _DECIMAL_TYPES:
        # NaN and the infinities have no JSON number: keep them as text. So is a numeric that Spark's
        # JSON parser would turn into a double (more than 38 digits in all or after the point).
        exact = _NUMBER.fullmatch(text) and (type_name != "numeric" or _fits_spark_decimal(text))
        return text if exact else json.dumps(text)
    if type_name == "boolean":
        return "true" if text in ("true", "t") else "false"
    if type_name in _JSON_TYPES:
        return text
    return json.dumps(text, ensure_ascii=False)


SPARK_DECIMAL_DIGITS = 38
"""Spark's largest decimal: the engine parses a record's JSON into ``VARIANT``, which keeps a number
of at most this many digits (and as many after the point) exactly, and makes a double of any other."""


def _fits_spark_decimal(text: str) -> bool:
    number = Decimal(text).as_tuple()
    scale = -number.exponent if isinstance(number.exponent, int) and number.exponent < 0 else 0
    return len(number.digits) <= SPARK_DECIMAL_DIGITS and scale <= SPARK_DECIMAL_DIGITS


@lru_cache(maxsize=4096)
def _name_json(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


def columns_json(columns: tuple[Column, ...] | list[Column]) -> str:
    """Columns as one JSON object; unchanged TOASTed values are left out (their value is unknown)."""
    parts = [f"{_name_json(c.name)}:{c.json()}" for c in columns if not c.toasted]
    return "{" + ",".join(parts) + "}"


def parse_row(data: str) -> Row:
    """One ``data`` value of ``pg_logical_slot_peek_changes`` with ``test_decoding``."""
    if data.startswith("BEGIN"):
        return Begin(_xid(data[5:]))
    if data.startswith("COMMIT"):
        return Commit(_xid(data[6:]))
    if data.startswith("table "):
        return _parse_change(data)
    return Other(data)


def _xid(rest: str) -> int | None:
    word = rest.strip().split(" ", 1)[0]
    return int(word) if word.isdigit() else None


class _Cursor:
    def __init__(self, text: str, pos: int) -> None:
        self.text, self.pos = text, pos

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def startswith(self, prefix: str) -> bool:
        return self.text.startswith(prefix, self.pos)

    def expect(self, literal: str) -> None:
        if not self.startswith(literal):
            raise ParseError(f"expected {literal!r} at {self.pos}: {self.text[self.pos : self.pos + 40]!r}")
        self.pos += len(literal)

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def quoted(self, quote: str) -> str:
        """A ``quote``-delimited token where a doubled quote stands for one."""
        self.expect(quote)
        out = []
        while True:
            end = self.text.find(quote, self.pos)
            if end < 0:
                raise ParseError(f"unterminated {quote} at {self.pos}")
            out.append(self.text[self.pos : end])
            if self.text.startswith(quote * 2, end):
                out.append(quote)
                self.pos = end + 2
                continue
            self.pos = end + 1
            return "".join(out)

    def until(self, stop: str) -> str:
        end = self.text.find(stop, self.pos)
        if end < 0:
            raise ParseError(f"expected {stop!r} after {self.pos}")
        token, self.pos = self.text[self.pos : end], end
        return token


def _parse_change(data: str) -> Change:
    # "table " QUALIFIED_NAME ": " ACTION ":" ...; a quoted name may itself hold ": ".
    cur = _Cursor(data, len("table "))
    end = data.find(": ", cur.pos)
    if end > 0 and '"' not in data[cur.pos : end]:
        table, cur.pos = data[cur.pos : end], end  # the common case: no quoted identifiers
    else:
        table = _qualified_name(cur)
    cur.expect(": ")
    action = cur.until(":")
    cur.expect(":")
    if action not in ("INSERT", "UPDATE", "DELETE"):
        return Change(table, action)
    cur.skip_spaces()
    if cur.startswith("(no-tuple-data)"):
        return Change(table, action)
    if action == "INSERT":
        return Change(table, action, new=_columns(cur))
    if action == "DELETE":
        return Change(table, action, old=_columns(cur))
    old = None
    if cur.startswith("old-key:"):
        cur.expect("old-key:")
        cur.skip_spaces()
        old = _columns(cur, stop_at="new-tuple:")
        cur.expect("new-tuple:")
        cur.skip_spaces()
    return Change(table, action, new=_columns(cur), old=old)


def _qualified_name(cur: _Cursor) -> str:
    start = cur.pos
    for part in range(2):
        if cur.startswith('"'):
            cur.quoted('"')
        else:
            while not cur.at_end() and cur.text[cur.pos] not in '.:"':
                cur.pos += 1
        if part == 0 and cur.startswith("."):
            cur.pos += 1
        else:
            break
    return cur.text[start : cur.pos]


# One column: NAME[TYPE]:VALUE, NAME bare or "quoted", VALUE 'quoted', B'bits' or a bare token.
_COLUMN = re.compile(
    r"""(?:"(?P<qname>[^"]*(?:""[^"]*)*)"|(?P<name>[^\["\s]+))\[(?P<type>.+?)\]:"""
    r"""(?:'(?P<quoted>[^']*(?:''[^']*)*)'|B'(?P<bits>[01]*)'|(?P<bare>[^\s']+))(?: |$)"""
)


def _columns(cur: _Cursor, stop_at: str | None = None) -> tuple[Column, ...]:
    columns = []
    text, match_at = cur.text, _COLUMN.match
    while cur.pos < len(text) and not (stop_at and text.startswith(stop_at, cur.pos)):
        m = match_at(text, cur.pos)
        if m is None:
            raise ParseError(f"expected a column at {cur.pos}: {text[cur.pos : cur.pos + 40]!r}")
        name = m["name"] if m["qname"] is None else m["qname"].replace('""', '"')
        type_name = m["type"]
        if m["quoted"] is not None:
            columns.append(Column(name, type_name, m["quoted"].replace("''", "'")))
        elif m["bits"] is not None:
            columns.append(Column(name, type_name, m["bits"]))
        elif m["bare"] == "null":
            columns.append(Column(name, type_name, None))
        elif m["bare"] == UNCHANGED_TOAST:
            columns.append(Column(name, type_name, None, toasted=True))
        else:
            columns.append(Column(name, type_name, m["bare"]))
        cur.pos = m.end()
        cur.skip_spaces()
    return tuple(columns)


def table_of(data: str) -> str | None:
    """The table a change row names, cheaply (no column parsing); None for other rows."""
    if not data.startswith("table "):
        return None
    end = data.find(": ", 6)
    name = data[6:end]
    if end < 0 or '"' in name:  # quoted names may hold ": " themselves
        change = parse_row(data)
        return change.table if isinstance(change, Change) else None
    return name


def unquote_identifier(name: str) -> str:
    """``"Odd Col"`` -> ``Odd Col``; ``public`` stays."""
    if name.startswith('"') and name.endswith('"') and len(name) >= 2:
        return name[1:-1].replace('""', '"')
    return name


# LSNs ----------------------------------------------------------------------------------------------


def lsn_to_int(lsn: str) -> int:
    """``"16/B374D848"`` -> a comparable integer."""
    high, _, low = str(lsn).partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def int_to_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
