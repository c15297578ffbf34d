"""A pipeline file's YAML as the loader reads it: mappings and sequences that remember their lines, and
refusals for files that would take the loader minutes or gigabytes (pure Python, PyYAML's SafeLoader).

A hostile file is refused before it is expanded:

- a file larger than :func:`max_file_bytes` (a pipeline file is a few kilobytes; a 50 MB one of 150,000
  pipelines took minutes and gigabytes to validate), checked before it is read;
- aliases that would expand the document by more than :data:`MAX_ALIAS_NODES` nodes (a "billion laughs":
  nine levels of nine aliases is 387 million nodes from 1 kB), counted on the composed node graph, whose
  shared nodes cost nothing until they are walked;
- an alias inside the node it refers to (a recursive document), which has no finite expansion;
- nesting deeper than :data:`MAX_DEPTH` levels, which would exhaust Python's stack while composing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from .errors import ConfigError, ConfigIssue

MAX_FILE_BYTES_ENV = "CONDUIT_MAX_PIPELINE_FILE_BYTES"
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ALIAS_NODES = 100_000
"""Nodes that aliases may add to a document (an anchor used often for shared settings stays far below)."""
MAX_DEPTH = 64
"""Nesting levels of a document (a pipeline file has about ten; PyYAML composes recursively)."""


class LineMap(dict[Any, Any]):
    """A YAML mapping that knows its own line and the line of each key (1-based)."""

    line: int
    key_lines: dict[Any, int]
    duplicates: list[tuple[Any, int]]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list[Any]):
    line: int
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    pass


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> Iterator[LineMap]:
    result = LineMap()
    result.line = node.start_mark.line + 1
    result.key_lines, result.duplicates = {}, []
    yield result  # yielding first lets aliases refer to this mapping before it is filled
    loader.flatten_mapping(node)  # resolves `<<` merge keys
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            key = str(key)
        line = key_node.start_mark.line + 1
        if key in result:
            # PyYAML silently keeps the last duplicate; Conduit users deserve to hear about it.
            result.duplicates.append((key, line))
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> Iterator[LineList]:
    result = LineList()
    result.line = node.start_mark.line + 1
    result.item_lines = []
    yield result
    for child in node.value:
        result.append(loader.construct_object(child, deep=True))
        result.item_lines.append(child.start_mark.line + 1)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def max_file_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The largest pipeline file read: ``$CONDUIT_MAX_PIPELINE_FILE_BYTES``, else 4 MiB."""
    value = (os.environ if environ is None else environ).get(MAX_FILE_BYTES_ENV, "").strip()
    try:
        return int(value) if value else DEFAULT_MAX_FILE_BYTES
    except ValueError:
        raise ConfigError(
            [ConfigIssue(f"${MAX_FILE_BYTES_ENV}", None, "", f"not a number of bytes: {value!r}")]
        ) from None


def check_size(label: str, size: int, limit: int) -> None:
    """Refuse a file of ``size`` bytes over ``limit``, saying how to raise the limit."""
    if size > limit:
        raise ConfigError(
            [
                ConfigIssue(
                    label,
                    None,
                    "",
                    f"the file has {size:,} bytes, more than the {limit:,} a pipeline file may have; "
                    f"split it, or raise ${MAX_FILE_BYTES_ENV} if it is meant to be this large",
                )
            ]
        )


class _Expansion:
    """Counts the nodes a composed YAML graph expands to, stopping at the first alias over the bound."""

    def __init__(self, label: str, anchors: dict[int, int]) -> None:
        self.label = label
        self.anchors = anchors  # id(node) -> how many places refer to it (1 + aliases)
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()
        self.added = 0

    def size(self, node: yaml.Node) -> int:
        key = id(node)
        if key in self.sizes:
            return self.sizes[key]
        if key in self.open:
            self._refuse(node, "an alias refers to a node that contains it (a recursive document)")
        self.open.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(self.size(k) + self.size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(self.size(child) for child in node.value)
        self.open.discard(key)
        self.sizes[key] = total
        self.added += total * (self.anchors.get(key, 1) - 1)
        if self.added > MAX_ALIAS_NODES:
            self._refuse(
                node,
                f"aliases expand the document by more than {MAX_ALIAS_NODES:,} nodes "
                "(an alias bomb?); write the repeated settings out, or use fewer aliases",
            )
        return total

    def _refuse(self, node: yaml.Node, message: str) -> None:
        raise ConfigError([ConfigIssue(self.label, node.start_mark.line + 1, "", message)])


class _CountingLoader(_Loader):
    """Composes like :class:`_Loader` and counts how often each anchored node is referred to."""

    def __init__(self, stream: str, label: str) -> None:
        super().__init__(stream)
        self.label = label
        self.references: dict[int, int] = {}
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            line = self.peek_event().start_mark.line + 1
            message = f"the document nests more than {MAX_DEPTH} levels deep"
            raise ConfigError([ConfigIssue(self.label, line, "", message)])
        node = super().compose_node(parent, index)
        self.depth -= 1
        self.references[id(node)] = self.references.get(id(node), 0) + 1
        return node


def parse(text: str, label: str) -> list[Any]:
    """Every YAML document of ``text`` (Conduit reads a file's documents one after another), each as
    :class:`LineMap`/:class:`LineList`/scalars; an empty file has none.

    :raises ConfigError: invalid YAML, aliases that expand too far or into themselves, nesting too deep
    """
    loader = _CountingLoader(text, label)
    try:
        nodes: list[yaml.Node] = []
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                nodes.append(node)
        expansion = _Expansion(label, loader.references)  # one bound for the whole file
        for node in nodes:
            expansion.size(node)
        return [loader.construct_document(node) for node in nodes]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError([ConfigIssue(label, line, "", f"invalid YAML: {problem}")]) from None
    finally:
        loader.dispose()
