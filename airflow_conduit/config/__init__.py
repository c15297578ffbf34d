"""The pipeline file: Conduit's YAML format loaded into frozen dataclasses, with every issue located.

Pure Python: never imports pyspark or airflow, so the CLI, the engine and the Airflow side can all use it.
"""

from __future__ import annotations

from .errors import ConfigError, ConfigIssue
from .loader import KNOWN_VERSIONS, load_pipeline_file, load_pipeline_text
from .model import ConnectorConfig, DLQConfig, PipelineConfig, PipelineFile, ProcessorConfig
from .registry import PLUGINS
from .spec import PluginSettings, PluginSpec

__all__ = [
    "KNOWN_VERSIONS",
    "PLUGINS",
    "ConfigError",
    "ConfigIssue",
    "ConnectorConfig",
    "DLQConfig",
    "PipelineConfig",
    "PipelineFile",
    "PluginSettings",
    "PluginSpec",
    "ProcessorConfig",
    "load_pipeline_file",
    "load_pipeline_text",
]
