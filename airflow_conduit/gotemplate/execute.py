"""Executing a parsed Go template against a value (a record), with Go's builtin functions (pure Python).

Go's rules kept: a pipeline's value is passed as the last argument of the next command; ``and``/``or``
stop at the first false/true argument and return it; ``if``/``with`` test truth (:func:`.values.truth`);
``with`` and ``range`` set the dot; variables are scoped to their block.
"""

from __future__ import annotations

import functools
import html
import json
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from .parser import (
    Action,
    Branch,
    Command,
    Dot,
    Field,
    Function,
    Literal,
    Node,
    Pipeline,
    TemplateCall,
    Text,
    Variable,
)
from .values import (
    NO_VALUE,
    RawData,
    StringMap,
    Struct,
    TemplateExecError,
    equal,
    go_type,
    less,
    to_text,
    truth,
)

GoFunction = Callable[..., Any]


class _Lazy:
    """An argument of ``and``/``or``, evaluated only when reached."""

    def __init__(self, evaluate: Callable[[], Any]) -> None:
        self.evaluate = evaluate


def _and(*args: _Lazy) -> Any:
    value: Any = None
    for arg in args:
        value = arg.evaluate()
        if not truth(value):
            return value
    return value


def _or(*args: _Lazy) -> Any:
    value: Any = None
    for arg in args:
        value = arg.evaluate()
        if truth(value):
            return value
    return value


def _eq(first: Any, *others: Any) -> bool:
    if not others:
        raise TemplateExecError("missing argument for comparison")
    return any(equal(first, other) for other in others)


def _len(value: Any) -> int:
    if isinstance(value, str | bytes | dict | list | tuple):
        return len(value.encode() if isinstance(value, str) else value)
    raise TemplateExecError(f"len of type {go_type(value)}")


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(value, dict):
            value = value.get(key, "" if isinstance(value, StringMap) else NO_VALUE)
        elif isinstance(value, list | tuple | str | bytes):
            if not isinstance(key, int) or not 0 <= key < len(value):
                raise TemplateExecError(f"index out of range: {key}")
            value = value[key]
        else:
            raise TemplateExecError(f"can't index item of type {go_type(value)}")
    return value


def _print(*args: Any) -> str:
    # fmt.Sprint adds a space between operands when neither is a string.
    out = ""
    for i, arg in enumerate(args):
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out += " "
        out += to_text(arg)
    return out


def sprintf(format_text: str, *args: Any) -> str:
    """``fmt.Sprintf`` for the verbs templates use: ``%v %s %d %f %.Nf %q %t %x %X %%``."""
    out: list[str] = []
    index = 0
    arg_index = 0
    while index < len(format_text):
        char = format_text[index]
        if char != "%":
            out.append(char)
            index += 1
            continue
        end = index + 1
        while end < len(format_text) and format_text[end] in "+-# 0123456789.":
            end += 1
        if end >= len(format_text):
            out.append("%!(NOVERB)")
            break
        flags, verb = format_text[index + 1 : end], format_text[end]
        index = end + 1
        if verb == "%":
            out.append("%")
            continue
        if arg_index >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[arg_index]
        arg_index += 1
        out.append(_verb(verb, flags, arg))
    if arg_index < len(args):
        out.append("%!(EXTRA " + ", ".join(f"{go_type(a)}={to_text(a)}" for a in args[arg_index:]) + ")")
    return "".join(out)


def _verb(verb: str, flags: str, arg: Any) -> str:
    try:
        if verb == "s" and type(arg) in (bytes, RawData):
            return arg.decode("utf-8", errors="replace")  # %s prints a []byte as its text, %v as numbers
        if verb in "vs":
            return f"{to_text(arg):{_width(flags)}}" if flags else to_text(arg)
        if verb == "d" and isinstance(arg, int) and not isinstance(arg, bool):
            return f"{arg:{flags}d}"
        if verb in "feg" and isinstance(arg, float | int) and not isinstance(arg, bool):
            return f"{float(arg):{flags or '.6'}{verb}}"
        if verb == "q" and isinstance(arg, str):
            return json.dumps(arg, ensure_ascii=False)
        if verb == "t" and isinstance(arg, bool):
            return "true" if arg else "false"
        if verb in "xX":
            data = arg.encode() if isinstance(arg, str) else arg
            if isinstance(data, bytes):
                text = data.hex()
            elif isinstance(data, int) and not isinstance(data, bool):
                text = f"{data:x}"
            else:
                raise ValueError
            return text.upper() if verb == "X" else text
    except (ValueError, TypeError):
        pass
    return f"%!{verb}({go_type(arg)}={to_text(arg)})"


def _width(flags: str) -> str:
    return (">" + flags) if flags and not flags.startswith("-") else ("<" + flags[1:] if flags else "")


def _not_supported(name: str) -> GoFunction:
    def refuse(*_args: Any) -> Any:
        raise TemplateExecError(f"{name} is not supported")

    return refuse


BUILTINS: dict[str, GoFunction] = {
    "and": _and,
    "or": _or,
    "not": lambda value: not truth(value),
    "eq": _eq,
    "ne": lambda a, b: not equal(a, b),
    "lt": less,
    "le": lambda a, b: less(a, b) or equal(a, b),
    "gt": lambda a, b: not (less(a, b) or equal(a, b)),
    "ge": lambda a, b: not less(a, b),
    "len": _len,
    "index": _index,
    "print": _print,
    "printf": sprintf,
    "println": lambda *args: " ".join(to_text(a) for a in args) + "\n",
    "html": lambda *args: html.escape(_print(*args), quote=True).replace("&#x27;", "&#39;"),
    "urlquery": lambda *args: urllib.parse.quote_plus(_print(*args)),
    "js": lambda *args: json.dumps(_print(*args))[1:-1].replace("'", "\\'"),
    "call": _not_supported("call"),
    "slice": lambda value, *bounds: value[slice(*bounds)] if bounds else value,
}
LAZY = frozenset({"and", "or"})


MAX_TEMPLATE_DEPTH = 100
"""Nested ``{{template}}`` calls allowed (Go allows 100000; Python's stack is smaller)."""


class Executor:
    def __init__(
        self,
        functions: Mapping[str, GoFunction],
        definitions: Mapping[str, tuple[Node, ...]] | None = None,
        *,
        missing_key_error: bool = False,
    ) -> None:
        self.functions = functions
        self.definitions = definitions or {}
        self.depth = 0
        # Go's Option("missingkey=error"), which the SDK's template record format sets.
        self.missing_key_error = missing_key_error

    def run(self, nodes: tuple[Node, ...], dot: Any) -> str:
        out: list[str] = []
        self.nodes(nodes, dot, [{"$": dot}], out)
        return "".join(out)

    def nodes(self, nodes: tuple[Node, ...], dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, Text):
                out.append(node.text)
            elif isinstance(node, Action):
                value = self.pipeline(node.pipeline, dot, scopes)
                if not node.pipeline.declare:
                    out.append(to_text(value))
            elif isinstance(node, TemplateCall):
                self.call(node, dot, scopes, out)
            else:
                self.branch(node, dot, scopes, out)

    def call(self, node: TemplateCall, dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
        body = self.definitions.get(node.name)
        if body is None:
            raise TemplateExecError(f"no such template {node.name!r}")
        value = self.pipeline(node.pipeline, dot, scopes) if node.pipeline is not None else NO_VALUE
        if self.depth >= MAX_TEMPLATE_DEPTH:
            raise TemplateExecError(f"exceeded maximum template depth ({MAX_TEMPLATE_DEPTH})")
        self.depth += 1
        try:
            # The named template sees its own dot and no variables of the caller: $ is its dot.
            self.nodes(body, value, [{"$": value}], out)
        finally:
            self.depth -= 1

    def branch(self, node: Branch, dot: Any, scopes: list[dict[str, Any]], out: list[str]) -> None:
        scopes.append({})
        try:
            value = self.pipeline(node.pipeline, dot, scopes)
            if node.keyword == "range":
                items = self.range_items(value)
                for key, item in items:
                    if len(node.pipeline.declare) == 2:
                        scopes[-1][node.pipeline.declare[0]] = key
                        scopes[-1][node.pipeline.declare[1]] = item
                    elif node.pipeline.declare:
                        scopes[-1][node.pipeline.declare[0]] = item
                    self.nodes(node.body, item, scopes, out)
                if not items:
                    self.nodes(node.otherwise, dot, scopes, out)
            elif truth(value):
                self.nodes(node.body, value if node.keyword == "with" else dot, scopes, out)
            else:
                self.nodes(node.otherwise, dot, scopes, out)
        finally:
            scopes.pop()

    @staticmethod
    def range_items(value: Any) -> list[tuple[Any, Any]]:
        if value is None or value is NO_VALUE:
            return []
        if isinstance(value, dict):
            return [(key, value[key]) for key in sorted(value, key=str)]
        if isinstance(value, list | tuple):
            return list(enumerate(value))
        if isinstance(value, int) and not isinstance(value, bool):
            return [(i, i) for i in range(value)]
        raise TemplateExecError(f"range can't iterate over {to_text(value)}")

    def pipeline(self, pipeline: Pipeline, dot: Any, scopes: list[dict[str, Any]]) -> Any:
        value: Any = _UNSET
        for command in pipeline.commands:
            value = self.command(command, dot, scopes, value)
        if pipeline.declare and len(pipeline.declare) == 1:
            name = pipeline.declare[0]
            if pipeline.assign:
                for scope in reversed(scopes):
                    if name in scope:
                        scope[name] = value
                        break
            else:
                scopes[-1][name] = value
        return value

    def command(self, command: Command, dot: Any, scopes: list[dict[str, Any]], piped: Any) -> Any:
        first, rest = command.args[0], command.args[1:]
        if isinstance(first, Function):
            function = self.functions.get(first.name)
            if function is None:
                raise TemplateExecError(f'function "{first.name}" not defined')
            if first.name in LAZY:
                lazy = [_Lazy(functools.partial(self.arg, arg, dot, scopes)) for arg in rest]
                if piped is not _UNSET:
                    lazy.append(_Lazy(lambda: piped))
                return function(*lazy)
            args = [self.arg(arg, dot, scopes) for arg in rest]
            if piped is not _UNSET:
                args.append(piped)
            try:
                return function(*args)
            except TemplateExecError as error:
                raise TemplateExecError(f"error calling {first.name}: {error}") from None
            except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as error:
                raise TemplateExecError(f"error calling {first.name}: {error}") from None
        if rest or piped is not _UNSET:
            raise TemplateExecError(f"can't give argument to non-function {self.describe(first)}")
        return self.arg(first, dot, scopes)

    def arg(self, arg: Any, dot: Any, scopes: list[dict[str, Any]]) -> Any:
        if isinstance(arg, Literal):
            return arg.value
        if isinstance(arg, Dot):
            return dot
        if isinstance(arg, Variable):
            return self.variable(arg.name, scopes)
        if isinstance(arg, Field):
            if arg.receiver is None:
                receiver = dot
            elif isinstance(arg.receiver, Variable):
                receiver = self.variable(arg.receiver.name, scopes)
            else:
                receiver = self.pipeline(arg.receiver, dot, scopes)
            return self.fields(receiver, arg.names)
        if isinstance(arg, Pipeline):
            return self.pipeline(arg, dot, scopes)
        if isinstance(arg, Function):
            return self.command(Command((arg,)), dot, scopes, _UNSET)
        raise TemplateExecError(f"cannot evaluate {arg!r}")

    @staticmethod
    def variable(name: str, scopes: list[dict[str, Any]]) -> Any:
        for scope in reversed(scopes):
            if name in scope:
                return scope[name]
        raise TemplateExecError(f"undefined variable: {name}")

    def fields(self, value: Any, names: tuple[str, ...]) -> Any:
        for name in names:
            if isinstance(value, Struct):
                value = value.field(name)
            elif isinstance(value, dict) and self.missing_key_error and name not in value:
                raise TemplateExecError(f'map has no entry for key "{name}"')
            elif isinstance(value, dict):
                value = value.get(name, "" if isinstance(value, StringMap) else NO_VALUE)
            elif value is None or value is NO_VALUE:
                raise TemplateExecError(f"nil pointer evaluating {go_type(value)}.{name}")
            else:
                raise TemplateExecError(f"can't evaluate field {name} in type {go_type(value)}")
        return value

    @staticmethod
    def describe(arg: Any) -> str:
        if isinstance(arg, Field):
            return "." + ".".join(arg.names)
        return to_text(getattr(arg, "value", arg))


_UNSET: Any = object()
