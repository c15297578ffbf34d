"""The validated pipeline file model: frozen dataclasses, built only by :mod:`.loader`.

Every node keeps ``field_path`` (``pipelines[0].connectors[1]``) and ``line`` so that the engine can
point at the file when something fails at run time too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .registry import spec_of
from .spec import PluginSpec

ConnectorType = Literal["source", "destination"]


@dataclass(frozen=True)
class ProcessorConfig:
    id: str
    plugin: str
    settings: Mapping[str, Any]
    """The plugin's settings after validation (the plugin's pydantic model, dumped to a dict by alias
    name, defaults filled in)."""
    condition: str | None = None
    """The condition translated to Spark SQL (field references replaced), or ``None``."""
    condition_source: str | None = None
    """The condition as the user wrote it, for messages."""
    workers: int = 1
    field_path: str = ""
    line: int | None = None
    node_id: str = ""
    """Conduit's node id: ``pipeline:processor`` or ``pipeline:connector:processor``."""

    @property
    def spec(self) -> PluginSpec:
        """The plugin's spec (registered: the loader accepts no other plugin)."""
        return spec_of(self.plugin, "processor")


@dataclass(frozen=True)
class ConnectorConfig:
    id: str
    type: ConnectorType
    plugin: str
    settings: Mapping[str, Any]
    name: str = ""
    processors: tuple[ProcessorConfig, ...] = ()
    field_path: str = ""
    line: int | None = None
    node_id: str = ""
    """Conduit's node id: ``pipeline:connector``."""

    @property
    def spec(self) -> PluginSpec:
        """The plugin's spec (registered: the loader accepts no other plugin)."""
        return spec_of(self.plugin, self.type)


@dataclass(frozen=True)
class DLQConfig:
    plugin: str = "builtin:log"
    settings: Mapping[str, Any] = field(
        default_factory=lambda: {"level": "warn", "message": "record delivery failed"}
    )
    window_size: int = 1
    window_nack_threshold: int = 0
    field_path: str = ""
    line: int | None = None
    """The line of ``dead-letter-queue`` in the file, ``None`` when it was not given (all defaults)."""


@dataclass(frozen=True)
class PipelineConfig:
    id: str
    status: Literal["running", "stopped"] = "running"
    name: str = ""
    description: str = ""
    connectors: tuple[ConnectorConfig, ...] = ()
    processors: tuple[ProcessorConfig, ...] = ()
    dlq: DLQConfig = field(default_factory=DLQConfig)
    field_path: str = ""
    line: int | None = None

    @property
    def sources(self) -> tuple[ConnectorConfig, ...]:
        return tuple(c for c in self.connectors if c.type == "source")

    @property
    def destinations(self) -> tuple[ConnectorConfig, ...]:
        return tuple(c for c in self.connectors if c.type == "destination")


@dataclass(frozen=True)
class PipelineFile:
    path: str
    version: str
    pipelines: tuple[PipelineConfig, ...]

    def get(self, pipeline_id: str) -> PipelineConfig:
        for pipeline in self.pipelines:
            if pipeline.id == pipeline_id:
                return pipeline
        known = ", ".join(p.id for p in self.pipelines)
        raise KeyError(f"{self.path}: no pipeline {pipeline_id!r} (the file has: {known})")
