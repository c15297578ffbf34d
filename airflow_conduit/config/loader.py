"""Load and validate a Conduit pipeline file into :mod:`.model`, collecting every issue with its line.

YAML is read by :mod:`.yaml_source` (mappings and sequences that remember the line of each key and item, so
a problem in a field value is reported at the line of its key; hostile files refused before expansion). ``${VAR}`` (and ``${VAR:-default}``) is
replaced from the environment in string values before validation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from airflow_conduit.gotemplate import Template, TemplateSyntaxError, is_template

from .errors import ConfigError, ConfigIssue
from .expand import expand
from .fieldref import condition_to_sql
from .model import (
    ConnectorConfig,
    ConnectorType,
    DLQConfig,
    PipelineConfig,
    PipelineFile,
    PipelineStatus,
    ProcessorConfig,
)
from .registry import plugin_names, plugin_spec
from .settings import CustomPythonSettings, check_python_function
from .spec import PluginKind, PluginSettings, PluginSpec, validate_settings
from .template_sql import condition_sql
from .yaml_source import LineList, LineMap, check_size, max_file_bytes, parse

KNOWN_VERSIONS = ("1.0", "1.1", "2.0", "2.1", "2.2")
DEFAULT_DLQ_PLUGIN = "builtin:log"
DEFAULT_DLQ_LOG_SETTINGS = {"level": "warn", "message": "record delivery failed"}

_PIPELINE_FIELDS = ("id", "status", "name", "description", "connectors", "processors", "dead-letter-queue")
_CONNECTOR_FIELDS = ("id", "type", "plugin", "name", "settings", "processors")
_PROCESSOR_FIELDS = ("id", "plugin", "type", "condition", "settings", "workers")
_CONNECTOR_KINDS: dict[str, ConnectorType] = {"source": "source", "destination": "destination"}
_DLQ_FIELDS = ("plugin", "settings", "window-size", "window-nack-threshold")
# Conduit's id alphabet (pkg/pipeline/service.go, pkg/connector/service.go: `^[A-Za-z0-9-_:.]*$`) and
# its length limits: a pipeline id 128 characters, a connector's full id (`pipeline:connector`) 256. Ids
# name files through state.path_segment; "." and ".." would name the state dir itself or its parent.
_ID = re.compile(r"[A-Za-z0-9_:.\-]+")
_PIPELINE_ID_LIMIT = 128
_CONNECTOR_ID_LIMIT = 256
LATEST_VERSION = {"1": "1.1", "2": "2.2"}
"""What a file of an unknown minor version (or none) is read as, by major version, as Conduit does."""


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _scalar(value: Any) -> str:
    """A YAML scalar as Conduit would see it (its settings and ids are strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


# --- validation ----------------------------------------------------------------------------------------


class _Validator:
    def __init__(self, file: str, base_dir: Path, env: Mapping[str, str]) -> None:
        self.file = file
        self.base_dir = base_dir
        self.env = env
        self.issues: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        # custom.python: each top-level module's ``path`` and where the file first named it.
        self.python_modules: dict[str, tuple[str | None, str]] = {}

    def issue(self, path: str, line: int | None, message: str) -> None:
        self.issues.append(ConfigIssue(self.file, line, path, message))

    def warn(self, path: str, line: int | None, message: str) -> None:
        """Something Conduit accepts with a warning (or silently): the file loads, the user hears of it."""
        self.warnings.append(ConfigIssue(self.file, line, path, message))

    # ---- environment substitution and duplicate keys (one pass over the raw tree) ----

    def substitute(self, node: Any, path: str, line: int) -> Any:
        if isinstance(node, LineMap):
            for key, dup_line in node.duplicates:
                self.issue(_join(path, key), dup_line, f"duplicate key {key!r}")
            for key in list(node):
                node[key] = self.substitute(node[key], _join(path, key), node.key_lines[key])
        elif isinstance(node, LineList):
            for i, item in enumerate(node):
                node[i] = self.substitute(item, f"{path}[{i}]", node.item_lines[i])
        elif isinstance(node, str):
            return self._expand(node, path, line)
        return node

    def _expand(self, text: str, path: str, line: int) -> str:
        expanded = expand(text, self.env)
        for name in expanded.unset:
            self.warn(
                path,
                line,
                f"environment variable {name} is not set, so it expands to the empty string as in Conduit "
                f"(write ${{{name}:-default}} for a default)",
            )
        return expanded.text

    # ---- field helpers ----

    def check_fields(self, node: LineMap, path: str, allowed: tuple[str, ...]) -> None:
        for key in node:
            if key not in allowed:
                self.warn(
                    _join(path, key),
                    node.line_of(key),
                    f"unknown field {key!r} is ignored, as Conduit ignores it (known: {', '.join(allowed)})",
                )

    def get_str(self, node: LineMap, key: str, path: str, *, required: bool = False) -> str | None:
        value = node.get(key)
        if value is None:
            if required:
                self.issue(_join(path, key), node.line, f"required field {key!r} is missing")
            return None
        if isinstance(value, dict | list):
            self.issue(_join(path, key), node.line_of(key), f"{key} must be a string")
            return None
        return _scalar(value)

    def get_int(self, node: LineMap, key: str, path: str, default: int, minimum: int) -> int:
        value = node.get(key)
        if value is None:
            return default
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            number = int(value)  # a `${VAR}` value arrives as a string
        if number is None:
            self.issue(_join(path, key), node.line_of(key), f"{key} must be an integer; got {value!r}")
            return default
        if number < minimum:
            self.issue(_join(path, key), node.line_of(key), f"{key} must be >= {minimum}; got {number}")
            return default
        return number

    def entries(
        self, node: LineMap, key: str, path: str, *, allow_mapping: bool
    ) -> list[tuple[LineMap, str, int, str | None]]:
        """The items of a list field as (mapping, field path, line, id given by the key in 1.x form)."""
        value = node.get(key)
        field_path = _join(path, key)
        out: list[tuple[LineMap, str, int, str | None]] = []
        if value is None:
            return out
        if isinstance(value, LineList):
            for i, item in enumerate(value):
                item_path, item_line = f"{field_path}[{i}]", value.item_lines[i]
                if isinstance(item, LineMap):
                    out.append((item, item_path, item_line, None))
                else:
                    self.issue(item_path, item_line, "must be a mapping")
        elif isinstance(value, LineMap) and allow_mapping:
            # Conduit 1.x: a mapping keyed by id.
            for item_id, item in value.items():
                item_path, item_line = _join(field_path, item_id), value.line_of(item_id)
                if item is None:
                    item = LineMap()
                    item.line, item.key_lines, item.duplicates = item_line, {}, []
                if isinstance(item, LineMap):
                    out.append((item, item_path, item_line, _scalar(item_id)))
                else:
                    self.issue(item_path, item_line, "must be a mapping")
        elif isinstance(value, LineMap):
            self.issue(
                field_path,
                node.line_of(key),
                f"{key} must be a list (the mapping form keyed by id is only accepted in version 1.x files)",
            )
        else:
            self.issue(field_path, node.line_of(key), f"{key} must be a list")
        return out

    def get_id(self, node: LineMap, path: str, key_id: str | None) -> tuple[str, str, int]:
        """The entry's id, and the path and line to report problems with it at."""
        if key_id is not None:
            explicit = node.get("id")
            if explicit is not None and _scalar(explicit) != key_id:
                self.issue(_join(path, "id"), node.line_of("id"), f"id {explicit!r} does not match its key")
            entry_id, id_path, id_line = key_id, path, node.line
        else:
            entry_id = self.get_str(node, "id", path, required=True) or ""
            id_path, id_line = _join(path, "id"), node.line_of("id")
        if entry_id and not _ID.fullmatch(entry_id):
            self.issue(
                id_path, id_line, f"invalid id {entry_id!r}: use letters, digits, '_', '-', ':' and '.'"
            )
        elif entry_id in (".", ".."):
            self.issue(
                id_path, id_line, f"invalid id {entry_id!r}: it would name a directory of the state dir"
            )
        return entry_id, id_path, id_line

    def check_length(self, full_id: str, limit: int, id_path: str, id_line: int, what: str) -> None:
        if len(full_id) > limit:
            self.issue(
                id_path, id_line, f"{what} id {full_id!r} is longer than {limit} characters (Conduit's limit)"
            )

    def check_unique(
        self, seen: dict[str, str], entry_id: str, id_path: str, id_line: int, what: str
    ) -> None:
        if not entry_id:
            return
        if entry_id in seen:
            self.issue(id_path, id_line, f"duplicate {what} id {entry_id!r} (first used at {seen[entry_id]})")
        else:
            seen[entry_id] = id_path

    # ---- settings ----

    def raw_settings(self, node: LineMap, path: str) -> tuple[dict[str, str], dict[str, int], str, int]:
        """Settings flattened to ``dotted.key -> string`` with the line of each key."""
        settings_path, settings_line = _join(path, "settings"), node.line_of("settings")
        flat: dict[str, str] = {}
        lines: dict[str, int] = {}
        value = node.get("settings")
        if value is None:
            return flat, lines, settings_path, settings_line
        if not isinstance(value, LineMap):
            self.issue(settings_path, settings_line, "settings must be a mapping of names to values")
            return flat, lines, settings_path, settings_line

        def walk(mapping: LineMap, prefix: str) -> None:
            for key, item in mapping.items():
                name = _join(prefix, key)
                if isinstance(item, LineMap):
                    # Nested YAML maps are accepted as a spelling of Conduit's dotted keys.
                    walk(item, name)
                elif isinstance(item, list):
                    self.issue(_join(settings_path, name), mapping.line_of(key), "must be a single value")
                    lines[name] = -1  # reported; keeps "required setting is missing" from repeating it
                else:
                    flat[name] = _scalar(item)
                    lines[name] = mapping.line_of(key)

        walk(value, "")
        return flat, lines, settings_path, settings_line

    def settings(
        self, spec: PluginSpec, raw: tuple[dict[str, str], dict[str, int], str, int]
    ) -> PluginSettings | None:
        flat, lines, settings_path, settings_line = raw
        validated, problems = validate_settings(spec, flat, self.base_dir)
        for key, message in problems:
            if lines.get(key) == -1:
                continue
            # A problem of the settings as a whole (one of two keys needed) has no key of its own.
            self.issue(
                _join(settings_path, key) if key else settings_path, lines.get(key, settings_line), message
            )
        return validated

    # ---- the model ----

    def pipeline_file(self, docs: list[Any]) -> PipelineFile | None:
        """The pipelines of every YAML document of the file (Conduit reads several, one after another)."""
        present = [doc for doc in docs if doc is not None]
        if not present:
            self.issue("", None, "the file is empty; expected 'version' and 'pipelines'")
            return None
        versions: list[str] = []
        pipelines: list[PipelineConfig] = []
        seen: dict[str, str] = {}  # pipeline ids are unique across the file's documents
        for doc in present:
            if not isinstance(doc, LineMap):
                self.issue("", 1, "a pipeline file must be a YAML mapping with 'version' and 'pipelines'")
                continue
            version = self.version(doc)
            versions.append(version or "")
            pipelines += self.document(doc, version, seen)
        mappings = [doc for doc in present if isinstance(doc, LineMap)]
        if mappings and not pipelines and not any(doc.get("pipelines") for doc in mappings):
            self.issue("pipelines", mappings[0].line, "the file defines no pipelines")
        return PipelineFile(
            path=self.file, version=versions[0] if versions else "", pipelines=tuple(pipelines)
        )

    def document(self, doc: LineMap, version: str | None, seen: dict[str, str]) -> list[PipelineConfig]:
        self.check_fields(doc, "", ("version", "pipelines"))
        is_v1 = version is not None and version.startswith("1.")
        pipelines: list[PipelineConfig] = []
        for node, path, line, key_id in self.entries(doc, "pipelines", "", allow_mapping=is_v1):
            pipeline_id, id_path, id_line = self.get_id(node, path, key_id)
            self.check_unique(seen, pipeline_id, id_path, id_line, "pipeline")
            self.check_length(pipeline_id, _PIPELINE_ID_LIMIT, id_path, id_line, "pipeline")
            pipelines.append(self.pipeline(node, path, line, pipeline_id, is_v1))
        return pipelines

    def version(self, doc: LineMap) -> str | None:
        """The version the document is read as: as written when known; else, as Conduit does, the latest
        of its major version (none given: the latest) with a warning; ``None`` for an unknown major."""
        written = self.get_str(doc, "version", "") or ""
        if written in KNOWN_VERSIONS:
            return written
        line = doc.line_of("version")
        if not written.strip():
            newest = LATEST_VERSION["2"]
            self.warn(
                "version", line, f"no version given; the file is read as version {newest}, as Conduit does"
            )
            return newest
        latest = LATEST_VERSION.get(written.split(".")[0])
        if latest is None:
            known = ", ".join(KNOWN_VERSIONS)
            self.issue("version", line, f"unknown version {written!r} (known: {known})")
            return None
        self.warn(
            "version",
            line,
            f"unknown version {written!r}; the file is read as version {latest}, as Conduit does",
        )
        return latest

    def pipeline(self, node: LineMap, path: str, line: int, pipeline_id: str, is_v1: bool) -> PipelineConfig:
        self.check_fields(node, path, _PIPELINE_FIELDS)
        given_status = self.get_str(node, "status", path) or "running"
        if given_status not in ("running", "stopped"):
            self.issue(
                _join(path, "status"),
                node.line_of("status"),
                f"must be running or stopped; got {given_status!r}",
            )
        status: PipelineStatus = "stopped" if given_status == "stopped" else "running"
        connectors: list[ConnectorConfig] = []
        scope: dict[str, str] = {}  # connectors and pipeline processors share one id space, as in Conduit
        bad_type = False
        for c_node, c_path, c_line, key_id in self.entries(node, "connectors", path, allow_mapping=is_v1):
            connector_id, id_path, id_line = self.get_id(c_node, c_path, key_id)
            self.check_unique(scope, connector_id, id_path, id_line, "connector")
            full_id = f"{pipeline_id}:{connector_id}"  # Conduit checks the id it prefixes with the pipeline's
            self.check_length(full_id, _CONNECTOR_ID_LIMIT, id_path, id_line, "connector")
            connector = self.connector(c_node, c_path, c_line, pipeline_id, connector_id, is_v1)
            bad_type = bad_type or connector.type not in ("source", "destination")
            connectors.append(connector)
        processors = self.processors(node, path, f"{pipeline_id}", scope, is_v1)
        if not bad_type:
            # With a mistyped connector type the user already has an issue that explains this one.
            where, where_line = _join(path, "connectors"), node.line_of("connectors")
            # Conduit accepts such a file and fails when it starts the pipeline: a warning here, and
            # `run` refuses the pipeline (PipelineConfig.cannot_run).
            for kind in ("source", "destination"):
                if not any(c.type == kind for c in connectors):
                    self.warn(
                        where, where_line, f"pipeline {pipeline_id!r} has no {kind} connector: it cannot run"
                    )
        return PipelineConfig(
            id=pipeline_id,
            status=status,
            name=self.get_str(node, "name", path) or pipeline_id,
            description=self.get_str(node, "description", path) or "",
            connectors=tuple(connectors),
            processors=processors,
            dlq=self.dlq(node, path),
            field_path=path,
            line=line,
        )

    def connector(
        self, node: LineMap, path: str, line: int, pipeline_id: str, connector_id: str, is_v1: bool
    ) -> ConnectorConfig:
        self.check_fields(node, path, _CONNECTOR_FIELDS)
        connector_type = self.get_str(node, "type", path, required=True) or ""
        kind = _CONNECTOR_KINDS.get(connector_type)
        type_ok = kind is not None
        if connector_type and not type_ok:
            self.issue(
                _join(path, "type"),
                node.line_of("type"),
                f"type must be source or destination; got {connector_type!r}",
            )
        plugin = self.plugin_name(node, "plugin", path, ("source", "destination"))
        spec = self.plugin(plugin, kind, ("source", "destination"), node, path)
        raw = self.raw_settings(node, path)
        settings = self.settings(spec, raw) if spec else None
        self.check_function(plugin, settings, raw)
        node_id = f"{pipeline_id}:{connector_id}"
        processors = self.processors(node, path, node_id, {}, is_v1)
        return ConnectorConfig(
            id=connector_id,
            # An invalid type is kept as written (the load fails with its issue, and the pipeline's checks
            # see no source or destination in it).
            type=cast(ConnectorType, connector_type),
            plugin=plugin,
            settings=settings or PluginSettings(),  # invalid: the load fails with its issues
            name=self.get_str(node, "name", path) or connector_id,
            processors=processors,
            field_path=path,
            line=line,
            node_id=node_id,
        )

    def plugin_name(
        self, node: LineMap, key: str, path: str, kinds: tuple[PluginKind, ...], default: str = ""
    ) -> str:
        """The plugin ``node[key]`` names (:func:`_normalise_plugin`); a version in the reference is
        accepted with a warning, as this product serves one version of each plugin."""
        written = self.get_str(node, key, path, required=not default) or default
        version = written.strip().partition("@")[2]
        if version and version != "latest":
            self.warn(
                _join(path, key),
                node.line_of(key),
                f"version {version!r} of {written.strip().partition('@')[0]!r} is not chosen here: "
                "airflow-conduit serves one version of each plugin, so the reference is read without it",
            )
        return _normalise_plugin(written, kinds)

    def plugin(
        self,
        plugin: str,
        kind: PluginKind | None,
        kinds: tuple[PluginKind, ...],
        node: LineMap,
        path: str,
        key: str = "plugin",
    ) -> PluginSpec | None:
        """The spec of ``plugin`` as a ``kind``; reports unknown plugins and plugins of the wrong kind."""
        if not plugin:
            return None
        where, line = _join(path, key), node.line_of(key)
        known = plugin_names(*kinds)
        if plugin not in known:
            why = not_served(_normalise_plugin(plugin, kinds))
            message = f"unknown plugin {plugin!r} (known: {', '.join(known)})"
            self.issue(
                where, line, f"{plugin!r} is a Conduit plugin not served here: {why}" if why else message
            )
            return None
        if kind is None:
            return None
        spec = plugin_spec(plugin, kind)
        if spec is None:
            other = " and ".join(k for k in kinds if plugin_spec(plugin, k))
            self.issue(
                where, line, f"plugin {plugin!r} is a {other} connector, it cannot be used as a {kind}"
            )
        return spec

    def processors(
        self, node: LineMap, path: str, parent_id: str, scope: dict[str, str], is_v1: bool
    ) -> tuple[ProcessorConfig, ...]:
        out = []
        for p_node, p_path, p_line, key_id in self.entries(node, "processors", path, allow_mapping=is_v1):
            processor_id, id_path, id_line = self.get_id(p_node, p_path, key_id)
            self.check_unique(scope, processor_id, id_path, id_line, "processor")
            out.append(self.processor(p_node, p_path, p_line, processor_id, f"{parent_id}:{processor_id}"))
        return tuple(out)

    def check_function(self, plugin: str, settings: PluginSettings | None, raw: Any) -> None:
        """``custom.python`` (processor or destination): the function must import as the engine will."""
        if plugin != "custom.python" or not isinstance(settings, CustomPythonSettings):
            return
        _flat, lines, settings_path, settings_line = raw
        where, line = _join(settings_path, "function"), lines.get("function", settings_line)
        # A process imports a module once: the same name from two paths would run the first one's code.
        module = settings.function.partition(":")[0].split(".")[0]
        first_path, first_where = self.python_modules.setdefault(module, (settings.path, where))
        if first_path != settings.path:
            self.issue(
                where,
                line,
                f"module {module!r} comes from {settings.path or 'the import path'} here but from "
                f"{first_path or 'the import path'} at {first_where}: one Python process imports a "
                "module once, so both would run the first one; rename one of the modules",
            )
            return
        problem = check_python_function(settings.function, settings.path)
        if problem:
            self.issue(where, line, f"cannot import {settings.function!r}: {problem}")

    def processor(
        self, node: LineMap, path: str, line: int, processor_id: str, node_id: str
    ) -> ProcessorConfig:
        self.check_fields(node, path, _PROCESSOR_FIELDS)
        # `type` is the deprecated (pre-2.2) name of `plugin`; `plugin` wins when both are given.
        key = "plugin" if node.get("plugin") is not None or node.get("type") is None else "type"
        plugin = self.plugin_name(node, key, path, ("processor",))
        spec = self.plugin(plugin, "processor", ("processor",), node, path, key)
        raw = self.raw_settings(node, path)
        settings = self.settings(spec, raw) if spec else None
        self.check_function(plugin, settings, raw)
        source = self.get_str(node, "condition", path)
        condition = template = None
        if source is not None and is_template(source):
            # Conduit's own: a Go template, as Spark SQL where it translates exactly, else per record.
            try:
                condition = condition_sql(Template.parse(source))
            except TemplateSyntaxError as error:
                self.issue(
                    _join(path, "condition"), node.line_of("condition"), f"not a valid Go template: {error}"
                )
            else:
                template = source if condition is None else None
        elif source is not None and source.strip():
            try:
                condition = condition_to_sql(source)
            except ValueError as error:
                self.issue(_join(path, "condition"), node.line_of("condition"), str(error))
        return ProcessorConfig(
            id=processor_id,
            plugin=plugin,
            settings=settings or PluginSettings(),  # invalid: the load fails with its issues
            condition=condition,
            condition_source=source if condition or template else None,
            condition_template=template,
            # Conduit's default: 0 (or none) is one worker.
            workers=self.get_int(node, "workers", path, default=1, minimum=0) or 1,
            field_path=path,
            line=line,
            node_id=node_id,
        )

    def dlq(self, pipeline: LineMap, pipeline_path: str) -> DLQConfig:
        path = _join(pipeline_path, "dead-letter-queue")
        node = pipeline.get("dead-letter-queue")
        if node is None:
            node = LineMap()
            node.line, node.key_lines, node.duplicates = pipeline.line_of("dead-letter-queue"), {}, []
        if not isinstance(node, LineMap):
            self.issue(path, pipeline.line_of("dead-letter-queue"), "dead-letter-queue must be a mapping")
            return DLQConfig(field_path=path, line=pipeline.line_of("dead-letter-queue"))
        self.check_fields(node, path, _DLQ_FIELDS)
        plugin = self.plugin_name(node, "plugin", path, ("destination",), default=DEFAULT_DLQ_PLUGIN)
        spec = self.plugin(plugin, "destination", ("destination",), node, path)
        raw = self.raw_settings(node, path)
        if node.get("settings") is None and plugin == DEFAULT_DLQ_PLUGIN:
            raw = (dict(DEFAULT_DLQ_LOG_SETTINGS), *raw[1:])  # Conduit's default DLQ settings
        settings = self.settings(spec, raw) if spec else None
        size = self.get_int(node, "window-size", path, default=1, minimum=0)
        threshold = self.get_int(node, "window-nack-threshold", path, default=0, minimum=0)
        if size > 0 and size <= threshold:
            self.issue(
                _join(path, "window-nack-threshold"),
                node.line_of("window-nack-threshold"),
                f"must be less than window-size ({size}) when window-size > 0; got {threshold} "
                "(use window-size: 0 to send every nack to the DLQ)",
            )
        return DLQConfig(
            plugin=plugin,
            settings=settings or PluginSettings(),  # invalid: the load fails with its issues
            window_size=size,
            window_nack_threshold=threshold,
            field_path=path,
            line=pipeline.line_of("dead-letter-queue") if "dead-letter-queue" in pipeline else None,
        )


# Conduit builtins this product does not serve, and why (README: "Your Conduit pipeline files").
_NOT_SERVED = {
    (
        "openai.",
        "ollama.",
        "cohere.",
    ): "the AI processors need a model server, which these machines cannot run",
    ("avro.",): "avro.encode/avro.decode need a schema registry, which is not supported",
    ("kafka",): (
        "no Kafka-compatible broker and no Spark Kafka connector can be installed where this product is "
        "built and tested, so it ships no Kafka connector (the brokers served: standalone:nats, "
        "standalone:redis, standalone:rabbitmq)"
    ),
}


def not_served(plugin: str) -> str | None:
    name = plugin.removeprefix("builtin:")
    return next((why for prefixes, why in _NOT_SERVED.items() if name.startswith(prefixes)), None)


def _normalise_plugin(name: str, kinds: tuple[PluginKind, ...]) -> str:
    """A plugin reference as this product names the plugin: Conduit's ``[builtin:]name[@version]`` with
    the prefix Conduit resolves (a connector without one is the builtin; builtin processors are named
    without one) and without the version (see :meth:`_Validator.plugin_version`)."""
    name = name.strip().partition("@")[0]
    known = plugin_names(*kinds)
    if name and ":" not in name:
        # Conduit resolves a bare connector name to the builtin first, then to a standalone connector.
        for prefix in ("builtin:", "standalone:"):
            if f"{prefix}{name}" in known:
                return f"{prefix}{name}"
    if name.startswith("builtin:") and name not in known and name.removeprefix("builtin:") in known:
        return name.removeprefix("builtin:")
    return name


# --- public API ----------------------------------------------------------------------------------------


def load_pipeline_text(
    text: str,
    path_label: str = "<string>",
    env: Mapping[str, str] | None = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
) -> PipelineFile:
    """Parse and validate pipeline YAML; raises :class:`ConfigError` with every issue found.

    ``path_label`` names the file in messages; relative ``custom.python`` paths resolve against
    ``base_dir`` (default: the directory of ``path_label``, or the working directory for ``<...>`` labels).
    """
    if base_dir is None:
        base_dir = Path.cwd() if path_label.startswith("<") else Path(path_label).parent
    environ = os.environ if env is None else env
    check_size(path_label, len(text.encode("utf-8")), max_file_bytes(environ))
    validator = _Validator(path_label, Path(base_dir).resolve(), environ)
    docs = [validator.substitute(doc, "", 1) for doc in parse(text, path_label)]
    result = validator.pipeline_file(docs)
    if validator.issues or result is None:
        raise ConfigError(sorted(validator.issues, key=lambda i: i.line or 0))
    return replace(result, warnings=tuple(sorted(validator.warnings, key=lambda i: i.line or 0)))


def load_pipeline_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> PipelineFile:
    """Load and validate a pipeline file; raises :class:`ConfigError` with every issue found."""
    label = os.fspath(path)
    try:
        # Before reading it: a file of gigabytes is refused without being read.
        check_size(label, Path(label).stat().st_size, max_file_bytes(os.environ if env is None else env))
        text = Path(label).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([ConfigIssue(label, None, "", f"cannot read the pipeline file: {error}")]) from None
    return load_pipeline_text(text, label, env, base_dir=Path(label).resolve().parent)
