"""Environment variables in a pipeline file's strings, expanded as Conduit expands them (Go's ``os.ExpandEnv``,
which Conduit applies to every string of the file), plus one extension of ours.

Conduit's rules, kept so that its files mean the same thing here:

- ``$NAME`` and ``${NAME}``: the variable's value; a variable that is not set is the empty string;
- a name is letters, digits and ``_`` (``$1`` and the shell's special ``$*``, ``$#``, ``$$``, ``$@``, ``$!``,
  ``$?``, ``$-`` name one character: ``pa$$word`` is ``paword``, as in Conduit);
- a ``$`` followed by nothing that can start a name stays (``US$ 5``, ``^refunds$``);
- ``${}`` and a ``${`` that is never closed are dropped.

The extension: ``${NAME:-default}`` is ``default`` when ``NAME`` is not set (Conduit would look up a variable
named ``NAME:-default`` and find nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

_SPECIAL = frozenset("*#$@!?-0123456789")


def _is_name_char(char: str) -> bool:
    return char == "_" or (char.isascii() and char.isalnum())


def _name_at(text: str, start: int) -> tuple[str, int]:
    """The variable name after a ``$`` at ``start - 1`` and how many characters it takes (Go's rules)."""
    first = text[start]
    if first == "{":
        if start + 2 < len(text) and text[start + 1] in _SPECIAL and text[start + 2] == "}":
            return text[start + 1], 3
        close = text.find("}", start + 1)
        if close == -1:
            return "", 1  # "${" never closed: dropped
        if close == start + 1:
            return "", 2  # "${}": dropped
        return text[start + 1 : close], close - start + 1
    if first in _SPECIAL:
        return first, 1
    end = start
    while end < len(text) and _is_name_char(text[end]):
        end += 1
    return text[start:end], end - start


@dataclass
class Expansion:
    """The expanded text and the variables it named that were not set."""

    text: str
    unset: list[str] = field(default_factory=list)


def expand(text: str, env: Mapping[str, str]) -> Expansion:
    """``text`` with its variables replaced from ``env``."""
    result = Expansion(text)
    if "$" not in text:
        return result

    def lookup(name: str) -> str:
        variable, sep, default = name.partition(":-")
        if sep and variable and all(_is_name_char(c) for c in variable):
            return env.get(variable, default)
        if name not in env:
            result.unset.append(name)
        return env.get(name, "")

    result.text = _expand(text, lookup)
    return result


def _expand(text: str, lookup: Callable[[str], str]) -> str:
    out: list[str] = []
    copied = 0
    index = 0
    while index < len(text):
        if text[index] == "$" and index + 1 < len(text):
            out.append(text[copied:index])
            name, width = _name_at(text, index + 1)
            if name:
                out.append(lookup(name))
            elif width == 0:
                out.append("$")  # no name follows: the dollar stays
            index += width
            copied = index + 1
        index += 1
    out.append(text[copied:])
    return "".join(out)
