"""``builtin:file``, a source and a destination: their settings and specs."""

from __future__ import annotations

from ..spec import PluginSpec
from ._common import DestinationSettings, RequiredStr
from .sdk import SourceSdkSettings

_ENGINE = "airflow_conduit.engine.connectors.file"


class FileSourceSettings(SourceSdkSettings):
    path: RequiredStr


class FileDestinationSettings(DestinationSettings):
    path: RequiredStr


SOURCE = PluginSpec(
    "builtin:file",
    "source",
    FileSourceSettings,
    engine=_ENGINE,
    spark_source="conduit_file",
    replays_identically=True,
    inspectable=True,
)
DESTINATION = PluginSpec(
    "builtin:file",
    "destination",
    FileDestinationSettings,
    engine=_ENGINE,
    delivery_marker=True,  # an atomic rename publishes the files and the marker together
    writes_on_stage=True,
    bulk_writes=True,
)
