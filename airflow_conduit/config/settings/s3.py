"""``builtin:s3``, a source and a destination: their settings and specs.

Setting names and defaults are those of Conduit's S3 connector (``conduit-connector-s3``):
``aws.accessKeyId``, ``aws.secretAccessKey``, ``aws.region``, ``aws.bucket`` (all required),
``aws.endpoint`` and ``aws.pathStyle`` (an S3-compatible store such as MinIO), ``prefix``; the source's
``pollingPeriod`` (default ``1s``), the destination's ``format`` (required: ``json``, ``parquet`` or
``original`` in Conduit; ``json`` here, see ``docs/connectors.md``).
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from ..spec import PluginSettings, PluginSpec
from ._common import DestinationSettings, RequiredStr
from ._duration import go_duration
from .sdk import SourceSdkSettings

_SOURCE_ENGINE = "airflow_conduit.engine.connectors.s3.source"
_DESTINATION_ENGINE = "airflow_conduit.engine.connectors.s3.destination"


class S3Connection(PluginSettings):
    """Where the bucket is and how to sign in (both kinds)."""

    access_key_id: RequiredStr = Field(alias="aws.accessKeyId")
    secret_access_key: SecretStr = Field(alias="aws.secretAccessKey")
    """A ``SecretStr``: it never shows in a repr, a log line or a validation message."""
    region: RequiredStr = Field(alias="aws.region")
    bucket: RequiredStr = Field(alias="aws.bucket")
    endpoint: str = Field(default="", alias="aws.endpoint")
    """An S3-compatible store (MinIO, moto): ``http(s)://host:port``; empty: AWS's own endpoints."""
    path_style: bool = Field(default=False, alias="aws.pathStyle")
    prefix: str = ""

    @field_validator("secret_access_key")
    @classmethod
    def _secret_required(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str) -> str:
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"must be an http:// or https:// URL with a host, such as http://localhost:9000 "
                f"(got {value!r}); leave it empty for AWS's own endpoints"
            )
        return value


class S3SourceSettings(SourceSdkSettings, S3Connection):
    polling_period: float = Field(default=1.0, alias="pollingPeriod")
    """Seconds between two listings of the bucket while it has nothing new (Conduit's default: 1s)."""

    @field_validator("polling_period", mode="before")
    @classmethod
    def _check_period(cls, value: Any) -> float:
        seconds = go_duration(str(value))
        if seconds <= 0:
            raise ValueError(f"must be a positive Go duration such as 1s or 500ms (got {value!r})")
        return seconds


class S3DestinationSettings(DestinationSettings, S3Connection):
    format: Literal["json", "parquet", "original"]
    """Required, as in Conduit. ``json``: one object per micro-batch, a line per record in
    ``sdk.record.format``. ``parquet`` and ``original`` are Conduit's too and refused here (for now)."""

    @field_validator("format")
    @classmethod
    def _served_formats(cls, value: str) -> str:
        if value != "json":
            raise ValueError(
                f"format {value!r} is not supported here yet: use format: json (JSON lines in "
                "sdk.record.format, default opencdc/json)"
            )
        return value


SOURCE = PluginSpec(
    "builtin:s3",
    "source",
    S3SourceSettings,
    engine=_SOURCE_ENGINE,
    spark_source="conduit_s3",
    # Exact for a versioned bucket (object versions never change); an object overwritten in a bucket
    # without versioning leaves its old range and comes again, newer, in a later batch.
    replays_identically=False,
)
DESTINATION = PluginSpec(
    "builtin:s3",
    "destination",
    S3DestinationSettings,
    engine=_DESTINATION_ENGINE,
    delivery_marker=True,  # a marker object with the delivery hash, written after the batch's object
    writes_on_stage=True,
)
