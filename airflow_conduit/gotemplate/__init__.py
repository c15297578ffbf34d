"""Go ``text/template``, as Conduit evaluates its processor conditions and templated settings (``field.set``
``value``, ``error`` ``message``, ``webhook.http`` URL and body), in pure Python.

>>> Template.parse('{{ eq .Metadata.table "orders" }}').execute(record)   # doctest: +SKIP
'true'

:meth:`Template.parse` refuses what cannot run (a syntax error, a function that is not defined) so that a
pipeline file is refused at ``validate``; :meth:`Template.execute` raises :class:`TemplateExecError` for a
record it cannot be evaluated on (Conduit nacks that record).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .execute import BUILTINS, Executor
from .lexer import TemplateSyntaxError
from .parser import Branch, Command, Field, Function, Node, Pipeline, parse
from .sprig import SPRIG
from .values import TemplateExecError

FUNCTIONS = {**SPRIG, **BUILTINS}
"""Every function a template may call: Go's builtins and the Sprig functions served here."""

__all__ = ["FUNCTIONS", "Template", "TemplateExecError", "TemplateSyntaxError", "is_template"]


def is_template(text: str) -> bool:
    """Whether ``text`` holds a template action (else it is plain text, the same with or without one)."""
    return "{{" in text


@dataclass(frozen=True)
class Template:
    source: str
    nodes: tuple[Node, ...]

    @classmethod
    def parse(cls, source: str) -> Template:
        """The parsed template; :class:`TemplateSyntaxError` for bad syntax or an unknown function."""
        nodes = parse(source)
        for name in sorted(_functions(nodes)):
            if name not in FUNCTIONS:
                raise TemplateSyntaxError(f'template: function "{name}" not defined')
        return cls(source, nodes)

    def execute(self, dot: Any, *, missing_key_error: bool = False) -> str:
        """The template's text for ``dot``; :class:`TemplateExecError` when it cannot be evaluated (and,
        with ``missing_key_error``, when a map has no entry for a key, as Go's ``missingkey=error``)."""
        return Executor(FUNCTIONS, missing_key_error=missing_key_error).run(self.nodes, dot)


def _functions(nodes: tuple[Node, ...]) -> Iterator[str]:
    for node in nodes:
        if isinstance(node, Branch):
            yield from _pipeline_functions(node.pipeline)
            yield from _functions(node.body)
            yield from _functions(node.otherwise)
        elif not isinstance(node, str) and hasattr(node, "pipeline"):
            yield from _pipeline_functions(node.pipeline)


def _pipeline_functions(pipeline: Pipeline) -> Iterator[str]:
    for command in pipeline.commands:
        yield from _command_functions(command)


def _command_functions(command: Command) -> Iterator[str]:
    for arg in command.args:
        if isinstance(arg, Function):
            yield arg.name
        elif isinstance(arg, Pipeline):
            yield from _pipeline_functions(arg)
        elif isinstance(arg, Field) and isinstance(arg.receiver, Pipeline):
            yield from _pipeline_functions(arg.receiver)
