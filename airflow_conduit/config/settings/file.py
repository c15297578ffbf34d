"""``builtin:file``, a source and a destination: their settings and specs."""

from __future__ import annotations

from pydantic import Field

from ..spec import PluginSettings, PluginSpec
from ._common import DEFAULT_MAX_RECORDS_PER_BATCH, DestinationSettings, RequiredStr

_ENGINE = "airflow_conduit.engine.connectors.file"


class FileSourceSettings(PluginSettings):
    path: RequiredStr
    max_records_per_batch: int = Field(DEFAULT_MAX_RECORDS_PER_BATCH, ge=1, alias="maxRecordsPerBatch")


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
)
