"""The validated pipeline file model: frozen dataclasses, built by :mod:`.loader`.

Every node keeps ``field_path`` (``pipelines[0].connectors[1]``) and ``line`` so that the engine can
point at the file when something fails at run time too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from .errors import ConfigIssue
from .registry import spec_of
from .settings import LogDestinationSettings
from .spec import PluginSettings, PluginSpec

ConnectorType = Literal["source", "destination"]
PipelineStatus = Literal["running", "stopped"]
S = TypeVar("S", bound=PluginSettings)
"""The plugin's settings model: ``ProcessorConfig[FieldSetSettings]`` is what ``field.set`` gets."""


def _validated(settings: Any, spec: Callable[[], PluginSpec]) -> Any:
    """Settings given as Conduit's key -> value map, by a pipeline built in code (the DLQ replay's), are
    validated into the plugin's model, as the loader validates a file's; a model is kept as it is."""
    if isinstance(settings, Mapping):
        return spec().settings_model.model_validate(dict(settings))
    return settings


@dataclass(frozen=True)
class ProcessorConfig(Generic[S]):
    id: str
    plugin: str
    settings: S
    """The plugin's settings, validated: its settings model (defaults filled in), read typed."""
    condition: str | None = None
    """The condition in Spark SQL (field references replaced, or a Go template translated), or ``None``."""
    condition_source: str | None = None
    """The condition as the user wrote it, for messages."""
    condition_template: str | None = None
    """A Go template condition that has no Spark SQL translation: evaluated per record in Python, and
    true when it prints what Go's ``strconv.ParseBool`` reads as true (``condition`` is ``None`` then)."""
    workers: int = 1
    field_path: str = ""
    line: int | None = None
    node_id: str = ""
    """Conduit's node id: ``pipeline:processor`` or ``pipeline:connector:processor``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", _validated(self.settings, lambda: self.spec))

    @property
    def spec(self) -> PluginSpec:
        """The plugin's spec (registered: the loader accepts no other plugin)."""
        return spec_of(self.plugin, "processor")


@dataclass(frozen=True)
class ConnectorConfig(Generic[S]):
    id: str
    type: ConnectorType
    plugin: str
    settings: S
    """The plugin's settings, validated: its settings model (defaults filled in), read typed."""
    name: str = ""
    processors: tuple[ProcessorConfig, ...] = ()
    field_path: str = ""
    line: int | None = None
    node_id: str = ""
    """Conduit's node id: ``pipeline:connector``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", _validated(self.settings, lambda: self.spec))

    @property
    def spec(self) -> PluginSpec:
        """The plugin's spec (registered: the loader accepts no other plugin)."""
        return spec_of(self.plugin, self.type)


@dataclass(frozen=True)
class DLQConfig:
    plugin: str = "builtin:log"
    settings: PluginSettings = field(
        default_factory=lambda: LogDestinationSettings(level="warn", message="record delivery failed")
    )
    """The DLQ plugin's settings, validated (Conduit's default: a warning in the log)."""
    window_size: int = 1
    window_nack_threshold: int = 0
    field_path: str = ""
    line: int | None = None
    """The line of ``dead-letter-queue`` in the file, ``None`` when it was not given (all defaults)."""

    def __post_init__(self) -> None:
        spec = lambda: spec_of(self.plugin, "destination")  # noqa: E731
        object.__setattr__(self, "settings", _validated(self.settings, spec))


@dataclass(frozen=True)
class PipelineConfig:
    id: str
    status: PipelineStatus = "running"
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

    def cannot_run(self) -> str | None:
        """Why the pipeline cannot start (Conduit provisions it, then fails to start it), if it cannot."""
        missing = [
            kind for kind in ("source", "destination") if not any(c.type == kind for c in self.connectors)
        ]
        if missing:
            return f"pipeline {self.id!r} has no {' and no '.join(missing)} connector; add one to run it"
        return None

    def all_processors(self) -> tuple[ProcessorConfig, ...]:
        """The pipeline's processors and every connector's."""
        return self.processors + tuple(p for c in self.connectors for p in c.processors)


@dataclass(frozen=True)
class PipelineFile:
    path: str
    version: str
    """The version the (first) document is read as."""
    pipelines: tuple[PipelineConfig, ...]
    warnings: tuple[ConfigIssue, ...] = ()
    """What Conduit accepts with a warning or silently (an unknown field, no version, an unset variable):
    the file loads; ``validate`` and ``run`` print these."""

    def get(self, pipeline_id: str) -> PipelineConfig:
        for pipeline in self.pipelines:
            if pipeline.id == pipeline_id:
                return pipeline
        known = ", ".join(p.id for p in self.pipelines)
        raise KeyError(f"{self.path}: no pipeline {pipeline_id!r} (the file has: {known})")
