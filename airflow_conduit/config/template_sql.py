"""Go templates translated to Spark SQL where the SQL means exactly what Go prints, so that built-in
processors stay in the JVM; everything else is evaluated per record in Python (pure Python).

Translated (values that can never be missing or of another kind, so Go cannot fail on them):

- ``.Metadata.name`` and ``index .Metadata "name"`` (a ``map[string]string``: a missing key is ``""``),
  string and bool literals;
- ``eq`` (any number of operands), ``ne``, ``lt``, ``le``, ``gt``, ``ge`` of strings (Go and Spark both
  compare strings by their bytes), ``hasPrefix``, ``hasSuffix``, ``contains`` of a string literal;
- ``and``, ``or`` of booleans, ``not`` of a boolean or a string (a string is true when not empty);
- a pipeline's value passed on as the last operand (``{{ .Metadata.table | hasPrefix "ord" }}``);
- ``toJson`` and ``toRawJson`` of ``.Key``, ``.Payload.Before`` and ``.Payload.After`` (the engine's
  ``conduit_go_json`` writes the value as Go's ``encoding/json`` does, raw data as base64): what a
  payload-only destination format (``{{ toJson .Payload.After }}``) prints.

Never translated: a template that reads the clock or draws random values (``now``, ``ago``, ``date`` of
a value that is not a time, ``uuidv4``, ...; :attr:`Template.deterministic`): Spark would fix or
re-draw its value per query, so it is decided once per record in Python, like user code.

Not translated: payload and key fields other than through ``toJson`` (Go fails on a number compared with a
string and prints a map its own way), ``.Operation`` (an int to Go), every other function; with
``missing_key_error`` (a destination's ``template`` format), ``.Metadata.name`` (a missing key fails
the template there). Those run in Python.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal as TypingLiteral

from airflow_conduit.gotemplate import Template
from airflow_conduit.gotemplate.parser import (
    Action,
    Command,
    Field,
    Function,
    Literal,
    Node,
    Pipeline,
    Text,
)
from airflow_conduit.record import GO_JSON_FUNCTION

from .fieldref import sql_string

_DATA_FIELDS = {("Key",): "key", ("Payload", "Before"): "before", ("Payload", "After"): "after"}
"""The record's data fields as a template names them, and their columns."""


@dataclass(frozen=True)
class _Sql:
    kind: TypingLiteral["string", "bool", "data"]  # data: a data field's column, only for toJson
    sql: str


class _NotTranslatable(Exception):
    pass


_COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_STRING_TESTS = {"hasPrefix": "startswith", "hasSuffix": "endswith", "contains": "contains"}


def condition_sql(template: Template) -> str | None:
    """Spark SQL for a condition template (one action whose value is a boolean), else ``None``."""
    if not template.deterministic:
        return None
    if len(template.nodes) != 1 or not isinstance(template.nodes[0], Action):
        return None
    try:
        value = _pipeline(template.nodes[0].pipeline)
    except _NotTranslatable:
        return None
    return value.sql if value.kind == "bool" else None


def text_sql(template: Template, *, missing_key_error: bool = False) -> str | None:
    """Spark SQL for the text a template prints (literal text and string values), else ``None``.
    ``missing_key_error``: the template runs with Go's ``missingkey=error``."""
    if not template.deterministic:
        return None
    if missing_key_error and any(_reads_metadata_field(node) for node in template.nodes):
        return None
    parts: list[str] = []
    try:
        for node in template.nodes:
            parts.append(_text_part(node))
    except _NotTranslatable:
        return None
    if not parts:
        return "''"
    return parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"


@functools.lru_cache(maxsize=256)
def source_text_sql(source: str, *, missing_key_error: bool = False) -> str | None:
    """:func:`text_sql` of a template's source, parsed once: the engine asks every micro-batch."""
    return text_sql(Template.parse(source), missing_key_error=missing_key_error)


def _text_part(node: Node) -> str:
    if isinstance(node, Text):
        return sql_string(node.text)
    if isinstance(node, Action) and not node.pipeline.declare:
        value = _pipeline(node.pipeline)
        if value.kind == "bool":
            return f"CASE WHEN {value.sql} THEN 'true' ELSE 'false' END"
        if value.kind == "string":
            return value.sql
    raise _NotTranslatable


def _reads_metadata_field(node: object) -> bool:
    """Whether ``.Metadata.name`` is in the node (``index .Metadata "name"`` is ``""`` for a missing
    key even under ``missingkey=error``)."""
    if isinstance(node, Field):
        return node.receiver is None and len(node.names) == 2 and node.names[0] == "Metadata"
    if isinstance(node, Action):
        return _reads_metadata_field(node.pipeline)
    if isinstance(node, Pipeline):
        return any(_reads_metadata_field(arg) for command in node.commands for arg in command.args)
    return False


def _pipeline(pipeline: Pipeline) -> _Sql:
    if pipeline.declare:
        raise _NotTranslatable
    value: _Sql | None = None
    for command in pipeline.commands:
        value = _command(command, value)
    assert value is not None  # a pipeline has at least one command
    return value


def _command(command: Command, piped: _Sql | None) -> _Sql:
    first, rest = command.args[0], command.args[1:]
    if not isinstance(first, Function):
        if rest or piped is not None:
            raise _NotTranslatable
        return _operand(first)
    if first.name == "index":
        return _index(rest, piped)
    args = [_operand(arg) for arg in rest] + ([piped] if piped is not None else [])
    return _function(first.name, args, rest)


def _index(rest: tuple[object, ...], piped: _Sql | None) -> _Sql:
    if piped is not None or len(rest) != 2:
        raise _NotTranslatable
    target, key = rest
    if not (isinstance(target, Field) and target.receiver is None and target.names == ("Metadata",)):
        raise _NotTranslatable
    if not (isinstance(key, Literal) and isinstance(key.value, str)):
        raise _NotTranslatable
    return _metadata(key.value)


def _function(name: str, args: list[_Sql], raw_args: tuple[object, ...]) -> _Sql:
    kinds = {arg.kind for arg in args}
    if name in ("eq", "ne") and len(args) >= 2 and kinds == {"string"}:
        first, others = args[0], args[1:]
        if name == "ne":
            if len(others) != 1:
                raise _NotTranslatable
            return _Sql("bool", f"({first.sql} <> {others[0].sql})")
        return _Sql("bool", "(" + " OR ".join(f"{first.sql} = {other.sql}" for other in others) + ")")
    if name in _COMPARISONS and len(args) == 2 and kinds == {"string"}:
        return _Sql("bool", f"({args[0].sql} {_COMPARISONS[name]} {args[1].sql})")
    if name in _STRING_TESTS and len(args) == 2 and kinds == {"string"}:
        # The needle must be a literal: a field as the needle is fine in SQL too, but keep it simple.
        needle = raw_args[0] if raw_args else None
        if not (isinstance(needle, Literal) and isinstance(needle.value, str)):
            raise _NotTranslatable
        return _Sql("bool", f"{_STRING_TESTS[name]}({args[1].sql}, {args[0].sql})")
    if name in ("and", "or") and args and kinds == {"bool"}:
        joiner = " AND " if name == "and" else " OR "
        return _Sql("bool", "(" + joiner.join(arg.sql for arg in args) + ")")
    if name == "not" and len(args) == 1 and args[0].kind != "data":
        if args[0].kind == "bool":
            return _Sql("bool", f"(NOT {args[0].sql})")
        return _Sql("bool", f"({args[0].sql} = '')")
    if name in ("toJson", "toRawJson") and len(args) == 1 and args[0].kind == "data":
        return _Sql("string", _go_json(args[0].sql, escape_html=name == "toJson"))
    raise _NotTranslatable


def _operand(arg: object) -> _Sql:
    if isinstance(arg, Literal) and isinstance(arg.value, bool):
        return _Sql("bool", "TRUE" if arg.value else "FALSE")
    if isinstance(arg, Literal) and isinstance(arg.value, str):
        return _Sql("string", sql_string(arg.value))
    if isinstance(arg, Field) and arg.receiver is None and len(arg.names) == 2 and arg.names[0] == "Metadata":
        return _metadata(arg.names[1])
    if isinstance(arg, Field) and arg.receiver is None and arg.names in _DATA_FIELDS:
        return _Sql("data", _DATA_FIELDS[arg.names])
    if isinstance(arg, Pipeline):
        return _pipeline(arg)
    raise _NotTranslatable


def _metadata(name: str) -> _Sql:
    return _Sql("string", f"coalesce(metadata[{sql_string(name)}], '')")


def _go_json(column: str, *, escape_html: bool) -> str:
    """Go's ``json.Marshal`` of a data field: structured data by ``conduit_go_json``, raw data (a
    ``[]byte``) as a base64 string, no value as ``null``."""
    html = "true" if escape_html else "false"
    return (
        f"CASE WHEN {column} IS NOT NULL THEN {GO_JSON_FUNCTION}({column}, {html}) "
        f"WHEN {column}_raw IS NOT NULL THEN concat('\"', base64({column}_raw), '\"') ELSE 'null' END"
    )
