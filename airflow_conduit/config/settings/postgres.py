"""``builtin:postgres``, a source and a destination: their settings and specs."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from ..spec import PluginSpec
from ._common import DestinationSettings, RequiredStr
from .sdk import SourceSdkSettings

_POSTGRES_URL = re.compile(r"postgres(?:ql)?://\S+")


def _check_postgres_url(value: str) -> str:
    value = value.strip()
    if not _POSTGRES_URL.fullmatch(value):
        # The value may hold a password: never echo it.
        raise ValueError("must be a URL like postgresql://user:password@host:5432/database")
    return value


class PostgresSourceSettings(SourceSdkSettings):
    """Conduit's postgres source: snapshot of ``tables``, then CDC (logical replication or long polling)."""

    url: RequiredStr
    tables: RequiredStr
    """Comma-separated table names (``table`` is accepted as in Conduit's older releases)."""
    key: str = ""
    """The column that orders the snapshot (default: each table's primary key)."""
    snapshot_mode: Literal["initial", "never"] = Field("initial", alias="snapshotMode")
    cdc_mode: Literal["auto", "logrepl", "long_polling"] = Field("auto", alias="cdcMode")
    slot_name: str = Field("conduitslot", alias="logrepl.slotName", pattern=r"^[a-z0-9_]{1,63}$")
    publication_name: str = Field("conduitpub", alias="logrepl.publicationName", min_length=1, max_length=63)
    """The publication ``pgoutput`` reads; created for ``tables`` unless it exists (as Conduit)."""
    auto_cleanup: bool = Field(True, alias="logrepl.autoCleanup")
    """Conduit drops the slot and publication when the pipeline is deleted. Pipelines are not deleted
    here (a file is just no longer run): accepted, and the slot and publication are kept."""
    with_avro_schema: bool | None = Field(None, alias="logrepl.withAvroSchema")
    """Conduit attaches an Avro schema from its schema registry; there is none here (see the check)."""
    snapshot_fetch_size: int = Field(50_000, ge=1, alias="snapshot.fetchSize")
    """Rows per round trip while reading a snapshot page (Conduit's default)."""
    plugin: Literal["auto", "pgoutput", "test_decoding"] = Field("auto", alias="logrepl.plugin")
    """Extension: the output plugin. ``auto``: the existing slot's, ``pgoutput`` (Conduit's) for a new
    one, so a slot made with ``test_decoding`` by an earlier release keeps working."""
    ordering_column: str = Field("", alias="orderingColumn")
    """``long_polling``: an increasing column; records with a greater value are read next."""
    poll_interval: float = Field(1.0, gt=0, alias="pollingPeriod")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _check_postgres_url(value)

    @model_validator(mode="before")
    @classmethod
    def _table_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "table" in data and "tables" not in data:
            data = dict(data)
            data["tables"] = data.pop("table")
        return data

    @model_validator(mode="after")
    def _check_long_polling(self) -> PostgresSourceSettings:
        if self.cdc_mode == "long_polling" and not self.ordering_column:
            raise ValueError("cdcMode long_polling needs orderingColumn (an increasing column)")
        if self.with_avro_schema:
            # Conduit's default is true; a file that leaves it out loads (its records carry no
            # schema here, as documented), one that asks for it explicitly is told.
            raise ValueError(
                "logrepl.withAvroSchema: true is not supported: records carry no Avro schema here (there "
                "is no schema registry); remove it or set it to false"
            )
        return self


class PostgresDestinationSettings(DestinationSettings):
    """Conduit's postgres destination; exactly once through a delivery marker in the same transaction."""

    RECORD_FORMAT_REFUSED: ClassVar[str] = (
        "builtin:postgres writes the record's fields as rows, not serialized records "
        "(Conduit's postgres destination ignores sdk.record.format too); remove the setting"
    )

    url: RequiredStr
    table: str = ""
    """Target table; empty: the record's ``opencdc.collection``."""
    key: str = ""
    """Key column: upsert on it when set (and delete by it), insert otherwise."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _check_postgres_url(value)


SOURCE = PluginSpec(
    "builtin:postgres",
    "source",
    PostgresSourceSettings,
    engine="airflow_conduit.engine.connectors.postgres.source",
    spark_source="conduit_postgres",
    inspectable=True,
)
DESTINATION = PluginSpec(
    "builtin:postgres",
    "destination",
    PostgresDestinationSettings,
    engine="airflow_conduit.engine.connectors.postgres.destination",
    delivery_marker=True,  # in the same transaction as the rows
    writes_on_stage=True,
)
