"""Go ``text/template``, as Conduit evaluates its processor conditions and templated settings (``field.set``
``value``, ``error`` ``message``, ``webhook.http`` URL and body), in pure Python.

>>> Template.parse('{{ eq .Metadata.table "orders" }}').execute(record)   # doctest: +SKIP
'true'

:meth:`Template.parse` refuses what cannot run (a syntax error, a function that is not defined) so that a
pipeline file is refused at ``validate``; :meth:`Template.execute` raises :class:`TemplateExecError` for a
record it cannot be evaluated on (Conduit nacks that record).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .execute import BUILTINS, Executor
from .lexer import TemplateSyntaxError
from .parser import Branch, Command, Field, Function, Node, Pipeline, TemplateCall, parse_tree
from .sprig import NONDETERMINISTIC, SPRIG
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
    definitions: Mapping[str, tuple[Node, ...]] = field(default_factory=dict)
    """The named templates (``define``, ``block``) that ``{{template}}`` calls."""

    @classmethod
    def parse(cls, source: str) -> Template:
        """The parsed template; :class:`TemplateSyntaxError` for bad syntax, an unknown function or a
        ``{{template}}`` of a name never defined (Go finds that when executing; it would fail for every
        record, so it is refused at validate)."""
        nodes, definitions = parse_tree(source)
        template = cls(source, nodes, definitions)
        for name in sorted(template.functions()):
            if name not in FUNCTIONS:
                raise TemplateSyntaxError(f'template: function "{name}" not defined')
        for called in sorted(template.called()):
            if called not in definitions:
                raise TemplateSyntaxError(f'template: no template "{called}" is defined')
        return template

    def functions(self) -> set[str]:
        """Every function the template and its named templates call."""
        names = set(_functions(self.nodes))
        for body in self.definitions.values():
            names.update(_functions(body))
        return names

    def called(self) -> set[str]:
        names = set(_called(self.nodes))
        for body in self.definitions.values():
            names.update(_called(body))
        return names

    @property
    def deterministic(self) -> bool:
        """Whether the text depends only on the record: it calls no function that reads the clock or
        draws random values (such a template is decided once per record, never in Spark SQL)."""
        return not (self.functions() & NONDETERMINISTIC)

    def execute(self, dot: Any, *, missing_key_error: bool = False) -> str:
        """The template's text for ``dot``; :class:`TemplateExecError` when it cannot be evaluated (and,
        with ``missing_key_error``, when a map has no entry for a key, as Go's ``missingkey=error``)."""
        return Executor(FUNCTIONS, self.definitions, missing_key_error=missing_key_error).run(self.nodes, dot)


def _functions(nodes: tuple[Node, ...]) -> Iterator[str]:
    for node in nodes:
        if isinstance(node, Branch):
            yield from _pipeline_functions(node.pipeline)
            yield from _functions(node.body)
            yield from _functions(node.otherwise)
        elif isinstance(node, TemplateCall):
            if node.pipeline is not None:
                yield from _pipeline_functions(node.pipeline)
        elif not isinstance(node, str) and hasattr(node, "pipeline"):
            yield from _pipeline_functions(node.pipeline)


def _called(nodes: tuple[Node, ...]) -> Iterator[str]:
    for node in nodes:
        if isinstance(node, TemplateCall):
            yield node.name
        elif isinstance(node, Branch):
            yield from _called(node.body)
            yield from _called(node.otherwise)


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
