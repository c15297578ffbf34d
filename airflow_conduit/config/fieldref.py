"""Conduit field references (``.Payload.After.name``) and processor conditions in Spark SQL.

Syntax, as in Conduit: ``.Position``, ``.Operation``, ``.Metadata``, ``.Metadata.key``,
``.Metadata["key.with.dots"]``, ``.Key``, ``.Key.a.b``, ``.Payload.Before``, ``.Payload.After.a.b``; any
segment after the root may be written ``["..."]`` (or ``['...']``) for names that are not identifiers.

A processor ``condition`` is a Spark SQL boolean expression in which field references stand for values
(a documented difference from Conduit's Go templates), e.g.
``.Payload.After.kind = 'refund' AND .Metadata["opencdc.collection"] = 'orders'``.
:func:`condition_to_sql` replaces each reference by :func:`ref_to_sql`, which yields the value **as a
string** (structured values as JSON, missing fields as NULL). Comparisons are therefore string
comparisons: numeric ones need a cast, e.g. ``CAST(.Payload.After.amount AS DOUBLE) > 100``.

Record columns assumed (see ``record.py``): ``position`` BINARY, ``operation`` STRING, ``metadata``
MAP<STRING,STRING>, and ``key``/``before``/``after`` VARIANT, each with a ``*_raw`` BINARY twin (exactly
one of a pair is non-null).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from airflow_conduit.record import variant_json_sql

Root = Literal["position", "operation", "metadata", "key", "before", "after"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOP_ROOTS: dict[str, Root | None] = {
    "Position": "position",
    "Operation": "operation",
    "Metadata": "metadata",
    "Key": "key",
    "Payload": None,  # needs .Before or .After
}
_PAYLOAD_ROOTS: dict[str, Root] = {"Before": "before", "After": "after"}
_DATA_ROOTS = ("key", "before", "after")
_EXAMPLE = 'e.g. .Payload.After.name or .Metadata["opencdc.collection"]'


@dataclass(frozen=True)
class FieldRef:
    """A parsed field reference: ``root`` and the field ``path`` below it (empty for the root itself)."""

    root: Root
    path: tuple[str, ...] = ()

    @property
    def is_data(self) -> bool:
        """True for ``.Key`` and ``.Payload.*``, which are structured (VARIANT) or raw (BINARY)."""
        return self.root in _DATA_ROOTS

    @property
    def column(self) -> str:
        return self.root

    @property
    def raw_column(self) -> str | None:
        return f"{self.root}_raw" if self.is_data else None

    def __str__(self) -> str:
        base = {
            "position": ".Position",
            "operation": ".Operation",
            "metadata": ".Metadata",
            "key": ".Key",
            "before": ".Payload.Before",
            "after": ".Payload.After",
        }[self.root]
        parts = [f".{s}" if _IDENT.fullmatch(s) else '["' + _go_escape(s) + '"]' for s in self.path]
        return base + "".join(parts)


def _go_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# --- parsing -------------------------------------------------------------------------------------------


def _read_quoted(text: str, pos: int) -> tuple[str, int]:
    """Read a ``"..."`` or ``'...'`` string at ``pos`` (backslash escapes the next character)."""
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if c == quote:
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise ValueError(f"unterminated string in field reference {text[pos:]!r}")


def _read_segments(text: str, pos: int) -> tuple[list[tuple[str, bool]], int]:
    """Read ``.name`` and ``["name"]`` segments from ``pos``; returns (name, was_bracketed) pairs."""
    segments: list[tuple[str, bool]] = []
    i = pos
    while i < len(text):
        if text[i] == ".":
            match = _IDENT.match(text, i + 1)
            if match is None:
                # `.["x"]` is a common slip for `["x"]`; accept it rather than be pedantic.
                if text.startswith(('.["', ".['"), i):
                    i += 1
                    continue
                raise ValueError(f"expected a field name after '.' at {text[i:]!r} ({_EXAMPLE})")
            segments.append((match.group(0), False))
            i = match.end()
        elif text.startswith(('["', "['"), i):
            name, i = _read_quoted(text, i + 1)
            if not text.startswith("]", i):
                raise ValueError(f"expected ']' after [{name!r} in {text[pos:]!r}")
            segments.append((name, True))
            i += 1
        else:
            break
    return segments, i


def _scan_ref(text: str, pos: int) -> tuple[FieldRef, int]:
    """Parse one field reference starting at ``text[pos]`` (a '.'); returns it and the end offset."""
    segments, end = _read_segments(text, pos)
    shown = text[pos:end] or text[pos:]
    if not segments or segments[0][1] or not text.startswith(".", pos):
        raise ValueError(f"a field reference starts with '.', {_EXAMPLE}; got {shown!r}")
    first = segments[0][0]
    if first not in _TOP_ROOTS:
        hint = next((f"; did you mean .{r}?" for r in _TOP_ROOTS if r.lower() == first.lower()), "")
        raise ValueError(
            f"unknown field {('.' + first)!r} in {shown!r}: a reference starts with .Position, "
            f".Operation, .Metadata, .Key, .Payload.Before or .Payload.After{hint}"
        )
    root = _TOP_ROOTS[first]
    rest = segments[1:]
    if root is None:
        second = rest[0][0] if rest else None
        if second not in _PAYLOAD_ROOTS:
            raise ValueError(f"{shown!r}: .Payload must be followed by .Before or .After")
        root = _PAYLOAD_ROOTS[second]
        rest = rest[1:]
    path = tuple(name for name, _ in rest)
    if root in ("position", "operation") and path:
        raise ValueError(f"{shown!r}: .{first} has no fields")
    if root == "metadata" and len(path) > 1:
        joined = ".".join(path)
        raise ValueError(
            f'{shown!r}: metadata is flat (one key); write .Metadata["{joined}"] for a key with dots'
        )
    if any(not name for name in path):
        raise ValueError(f"{shown!r}: empty field name")
    if root in _DATA_ROOTS:
        for name in path:
            if "'" in name and '"' in name:
                # Spark's variant path syntax has no escapes: a name needs a quote it does not contain.
                raise ValueError(f"{shown!r}: field names with both ' and \" cannot be addressed")
    return FieldRef(root, path), end


def parse_field_ref(text: str) -> FieldRef:
    """Parse a whole string as one field reference; raises ``ValueError`` with a helpful message."""
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"empty field reference ({_EXAMPLE})")
    ref, end = _scan_ref(stripped, 0)
    if end != len(stripped):
        raise ValueError(f"unexpected {stripped[end:]!r} after field reference {stripped[:end]!r}")
    return ref


_WHOLE_PAYLOAD = re.compile(r"\.Payload(?=\s*(,|$))")


def _split_list(text: str, what: str, whole_payload: bool = False) -> list[tuple[FieldRef, str]]:
    """Parse ``ref[:name], ref[:name], ...``; commas and colons inside ``["..."]`` are not separators.
    With ``whole_payload``, ``.Payload`` stands for ``.Payload.Before`` and ``.Payload.After``."""
    items: list[tuple[FieldRef, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            raise ValueError(f"empty entry in {what} {text!r}")
        if whole_payload and (whole := _WHOLE_PAYLOAD.match(text, i)):
            items.append((FieldRef("before"), ""))
            ref, i = FieldRef("after"), whole.end()
        else:
            ref, i = _scan_ref(text, i)
        name = ""
        if i < n and text[i] == ":":
            end = text.find(",", i)
            end = n if end < 0 else end
            name = text[i + 1 : end].strip()
            i = end
        while i < n and text[i].isspace():
            i += 1
        items.append((ref, name))
        if i >= n:
            return items
        if text[i] != ",":
            raise ValueError(f"unexpected {text[i:]!r} in {what} {text!r}")
        i += 1


def parse_field_list(text: str) -> tuple[FieldRef, ...]:
    """Parse a comma-separated list of references (``field.exclude``'s ``fields``); ``.Payload`` is both
    ``.Payload.Before`` and ``.Payload.After``, as Conduit's reference to the whole payload."""
    items = _split_list(text, "field list", whole_payload=True)
    for ref, name in items:
        if name:
            raise ValueError(f"unexpected ':{name}' after {str(ref)!r} in field list {text!r}")
    return tuple(ref for ref, _ in items)


_PLAIN_NAME = re.compile(r"[^.\[\]\"',:\s]+")


def parse_rename_mapping(text: str) -> tuple[tuple[FieldRef, str], ...]:
    """Parse ``field.rename``'s ``mapping``: ``.Payload.After.a:b,.Metadata.c:d``.

    Each reference must name one field inside .Metadata, .Key, .Payload.Before or .Payload.After, and the
    new name must be a plain name (it stays at the same level).
    """
    items = _split_list(text, "rename mapping")
    for ref, name in items:
        if ref.root in ("position", "operation") or not ref.path:
            raise ValueError(
                f"cannot rename {str(ref)!r}: name a field inside .Metadata, .Key, .Payload.Before or "
                ".Payload.After"
            )
        if not name:
            raise ValueError(f"missing ':newName' after {str(ref)!r} in rename mapping {text!r}")
        if not _PLAIN_NAME.fullmatch(name):
            raise ValueError(f"new name {name!r} for {str(ref)!r} must be a plain name (no dots or quotes)")
    return tuple(items)


# --- Spark SQL -----------------------------------------------------------------------------------------


def sql_string(value: str) -> str:
    """A Spark SQL string literal (Spark unescapes backslashes in literals by default)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_string_map(entries: Mapping[str, str]) -> str:
    """A Spark SQL ``map`` of string literals, in the order given (a constant Spark folds)."""
    return "map(" + ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in entries.items()) + ")"


def variant_path(path: tuple[str, ...]) -> str:
    """A ``variant_get`` path. Spark's path syntax has no escapes, so brackets use a quote not in the name
    (checked in Spark 4.2: ``$['a b']``, ``$["it's"]``, ``$['x"y']``, ``$['a.b']`` all work)."""
    parts = ["$"]
    for name in path:
        if _IDENT.fullmatch(name):
            parts.append(f".{name}")
        elif "'" not in name:
            parts.append(f"['{name}']")
        elif '"' not in name:
            parts.append(f'["{name}"]')
        else:
            raise ValueError(f"field name {name!r} contains both ' and \" and cannot be addressed")
    return "".join(parts)


def ref_to_sql(ref: FieldRef) -> str:
    """A Spark SQL expression for the value of ``ref`` as a STRING (NULL when the field is missing)."""
    if ref.root == "position":
        return "CAST(position AS STRING)"
    if ref.root == "operation":
        return "operation"
    if ref.root == "metadata":
        return f"metadata[{sql_string(ref.path[0])}]" if ref.path else "to_json(metadata)"
    if ref.path:
        # A path into raw data is NULL, as a missing field would be.
        return f"try_variant_get({ref.root}, {sql_string(variant_path(ref.path))}, 'string')"
    return f"COALESCE({variant_json_sql(ref.root)}, CAST({ref.root}_raw AS STRING))"


_REF_START = re.compile(r"\.(Position|Operation|Metadata|Key|Payload)(?![A-Za-z0-9_])")
_REF_START_ANY_CASE = re.compile(r"\.(position|operation|metadata|key|payload)(?![A-Za-z0-9_])", re.I)


def _skip_quoted(text: str, pos: int) -> int:
    """End offset of the SQL string or backtick identifier starting at ``pos``."""
    quote = text[pos]
    i = pos + 1
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "`":
            i += 2
            continue
        if c == quote:
            # A doubled quote is an escaped quote, not the end.
            if text.startswith(quote, i + 1):
                i += 2
                continue
            return i + 1
        i += 1
    raise ValueError(f"unterminated {quote} quote at {text[pos:]!r}")


def _translate(condition: str) -> str:
    out: list[str] = []
    i, n = 0, len(condition)
    while i < n:
        c = condition[i]
        if c in "'\"`":
            end = _skip_quoted(condition, i)
        elif condition.startswith("--", i):
            end = condition.find("\n", i)
            end = n if end < 0 else end
        elif condition.startswith("/*", i):
            end = condition.find("*/", i)
            end = n if end < 0 else end + 2
        elif c == "." and (i == 0 or not (condition[i - 1].isalnum() or condition[i - 1] in "_)]`")):
            # Only a '.' that does not follow a name, a call or an index starts a reference:
            # `t.Key` and `1.5` stay as they are.
            if _REF_START.match(condition, i):
                ref, end = _scan_ref(condition, i)
                out.append(ref_to_sql(ref))
                i = end
                continue
            if _REF_START_ANY_CASE.match(condition, i):
                raise ValueError(
                    f"field references are case-sensitive: {condition[i:].split()[0]!r} should be "
                    "written like .Payload.After.x, .Metadata.x, .Key, .Operation or .Position"
                )
            end = i + 1
        else:
            end = i + 1
        out.append(condition[i:end])
        i = end
    return "".join(out)


def condition_to_sql(condition: str) -> str:
    """Translate a processor condition to Spark SQL and check that it parses as one expression.

    Raises ``ValueError`` (a Go template condition, a bad field reference, or a SQL parse problem).
    """
    text = condition.strip()
    if not text:
        raise ValueError("empty condition")
    if text.startswith("{{"):
        raise ValueError(
            "conditions are Spark SQL boolean expressions with field references, not Go templates: "
            'write e.g. .Metadata["foo"] = \'bar\' instead of {{ eq .Metadata.foo "bar" }}'
        )
    sql = _translate(text)
    shown = f" (translated: {sql})" if sql != text else ""
    try:
        statements = sqlglot.parse(sql, read="spark")
    except ParseError as error:
        first = error.errors[0] if error.errors else {}
        description = re.sub(r"<class '(?:\w+\.)*(\w+)'>", r"\1", str(first.get("description", error)))
        near = first.get("highlight")
        where = f" near {near!r}" if near else ""
        raise ValueError(f"not a valid Spark SQL expression: {description}{where}{shown}") from None
    except TokenError as error:
        raise ValueError(f"not a valid Spark SQL expression: {error}{shown}") from None
    if len(statements) != 1 or statements[0] is None:
        raise ValueError("a condition must be a single Spark SQL expression (no ';')")
    if not isinstance(statements[0], exp.Condition):
        raise ValueError(f"a condition must be a boolean expression, not a statement: {text!r}")
    return sql
