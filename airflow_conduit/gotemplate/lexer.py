"""Go ``text/template`` source split into text and action tokens (pure Python).

The rules followed are those of Go's ``text/template`` package: actions sit between ``{{`` and ``}}``;
``{{- `` trims the white space before the action and `` -}}`` the white space after it (the dash needs a
space beside it, else ``{{-3}}`` is the number -3); ``{{/* */}}`` is a comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class TemplateSyntaxError(ValueError):
    """The template cannot be parsed; the message says where (byte offset and line) and why."""


class Kind(Enum):
    TEXT = "text"
    LEFT = "{{"
    RIGHT = "}}"
    FIELD = "field"  # .Name
    DOT = "."
    VARIABLE = "variable"  # $ or $name
    IDENTIFIER = "identifier"  # a function or a keyword
    STRING = "string"
    RAW_STRING = "raw string"
    CHAR = "char"
    NUMBER = "number"
    BOOL = "bool"
    NIL = "nil"
    DECLARE = ":="
    ASSIGN = "="
    PIPE = "|"
    LEFT_PAREN = "("
    RIGHT_PAREN = ")"
    COMMA = ","
    SPACE = "space"


KEYWORDS = frozenset(
    {"if", "else", "end", "range", "with", "break", "continue", "define", "template", "block"}
)


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str
    offset: int


_ACTION_TOKENS = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<declare>:=)
  | (?P<assign>=)
  | (?P<pipe>\|)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<comma>,)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<char>'(?:[^'\\\n]|\\.)+')
  | (?P<number>[+-]?(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d+)?)i?)
  | (?P<field>\.[A-Za-z_][A-Za-z0-9_]*)
  | (?P<dot>\.)
  | (?P<variable>\$[A-Za-z0-9_]*)
  | (?P<identifier>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)
_KINDS = {
    "space": Kind.SPACE,
    "declare": Kind.DECLARE,
    "assign": Kind.ASSIGN,
    "pipe": Kind.PIPE,
    "lparen": Kind.LEFT_PAREN,
    "rparen": Kind.RIGHT_PAREN,
    "comma": Kind.COMMA,
    "string": Kind.STRING,
    "raw": Kind.RAW_STRING,
    "char": Kind.CHAR,
    "number": Kind.NUMBER,
    "field": Kind.FIELD,
    "dot": Kind.DOT,
    "variable": Kind.VARIABLE,
    "identifier": Kind.IDENTIFIER,
}


def line_at(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def _error(source: str, offset: int, message: str) -> TemplateSyntaxError:
    return TemplateSyntaxError(f"template: line {line_at(source, offset)}: {message}")


def tokenize(source: str) -> list[Token]:
    """Text tokens and, for each action, ``{{``, its tokens (spaces kept: they separate arguments), ``}}``."""
    tokens: list[Token] = []
    position = 0
    trim_next_text = False
    while position <= len(source):
        start = source.find("{{", position)
        text_end = len(source) if start == -1 else start
        text = source[position:text_end]
        if start != -1 and source.startswith(("{{- ", "{{-\t", "{{-\n", "{{-\r"), start):
            text = text.rstrip(" \t\r\n")
        if trim_next_text:
            text = text.lstrip(" \t\r\n")
        if text:
            tokens.append(Token(Kind.TEXT, text, position))
        if start == -1:
            break
        inner_start = start + 2
        if source.startswith(("- ", "-\t", "-\n", "-\r"), inner_start):
            inner_start += 1
        end = source.find("}}", inner_start)
        if end == -1:
            raise _error(source, start, "unclosed action")
        inner_end, trim_next_text = end, False
        if end - 1 >= inner_start and source[end - 1] == "-" and source[end - 2 : end - 1].isspace():
            inner_end, trim_next_text = end - 1, True
        body = source[inner_start:inner_end]
        stripped = body.strip()
        if stripped.startswith("/*"):
            if not stripped.endswith("*/"):
                raise _error(source, start, "unclosed comment")
        else:
            tokens.append(Token(Kind.LEFT, "{{", start))
            tokens += _action(source, body, inner_start)
            tokens.append(Token(Kind.RIGHT, "}}", end))
        position = end + 2
    return tokens


def _action(source: str, body: str, base: int) -> list[Token]:
    tokens = []
    index = 0
    while index < len(body):
        match = _ACTION_TOKENS.match(body, index)
        if match is None or match.end() == index:
            raise _error(source, base + index, f"unexpected {body[index]!r} in action")
        group = match.lastgroup or ""
        text = match.group()
        kind = _KINDS[group]
        if kind is Kind.IDENTIFIER and text in ("true", "false"):
            kind = Kind.BOOL
        elif kind is Kind.IDENTIFIER and text == "nil":
            kind = Kind.NIL
        tokens.append(Token(kind, text, base + index))
        index = match.end()
    return tokens
