"""``standalone:nats`` (NATS JetStream): its settings and its specs, with the setting names and defaults of
Conduit's conduit-connector-nats-jetstream (``config/config.go``, ``internal/source/config.go``,
``internal/destination/config.go``)."""

from __future__ import annotations

import os
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from ..spec import PluginSettings, PluginSpec
from ._common import DestinationSettings, RequiredStr, comma_list, go_duration
from .sdk import SourceSdkSettings

_ENGINE_SOURCE = "airflow_conduit.engine.connectors.nats.source"
_ENGINE_DESTINATION = "airflow_conduit.engine.connectors.nats.destination"
_SCHEMES = ("nats", "tls", "ws", "wss")


class NatsConnectionSettings(PluginSettings):
    """What the source and the destination share (Conduit's ``config.Config``)."""

    urls: str = Field(min_length=1)
    """Comma-separated server URLs (``nats://user:password@host:4222``); credentials in them never reach
    a log or an exit payload."""
    subject: RequiredStr
    connection_name: str = Field("", alias="connectionName")
    """Default: the connector's id (as in Conduit)."""
    nkey_path: str = Field("", alias="nkeyPath")
    credentials_file_path: str = Field("", alias="credentialsFilePath")
    max_reconnects: int = Field(5, alias="maxReconnects")
    reconnect_wait: float = Field(5.0, alias="reconnectWait")
    tls_client_cert_path: str = Field("", alias="tls.clientCertPath")
    tls_client_private_key_path: str = Field("", alias="tls.clientPrivateKeyPath")
    tls_root_ca_cert_path: str = Field("", alias="tls.rootCACertPath")

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, value: str) -> str:
        urls = comma_list(value)
        if not urls:
            raise ValueError("give at least one server URL, e.g. nats://127.0.0.1:4222")
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in _SCHEMES or not parts.hostname:
                shown = (
                    f"{parts.scheme}://{parts.hostname or ''}" if parts.scheme else "a URL without a scheme"
                )
                raise ValueError(
                    f"not a NATS server URL ({shown}): use {'|'.join(_SCHEMES)}://host:port, e.g. "
                    "nats://127.0.0.1:4222"
                )
        return ",".join(urls)

    @field_validator("reconnect_wait", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return go_duration(str(value))

    @field_validator("nkey_path", "credentials_file_path", "tls_root_ca_cert_path")
    @classmethod
    def _readable(cls, value: str) -> str:
        if value and not os.access(value, os.R_OK):
            raise ValueError(f"cannot read the file {value!r}")
        return value

    @model_validator(mode="after")
    def _tls_pair(self) -> Any:
        # Conduit: a client certificate and its private key come together.
        if bool(self.tls_client_cert_path) != bool(self.tls_client_private_key_path):
            missing = "tls.clientPrivateKeyPath" if self.tls_client_cert_path else "tls.clientCertPath"
            raise ValueError(f"{missing} is missing (a client certificate needs its private key)")
        return self

    @property
    def server_urls(self) -> list[str]:
        return comma_list(self.urls)


class NatsSourceSettings(SourceSdkSettings, NatsConnectionSettings):
    """A durable pull consumer on ``stream``, filtered by ``subject``."""

    stream: RequiredStr
    durable: str = ""
    """The durable consumer's name. Conduit's default is a new random name per start (which never
    resumes); here the default is ``conduit-<pipeline>-<connector id>``, so a restart resumes."""
    buffer_size: int = Field(1024, gt=64, alias="bufferSize")
    """Conduit: the buffer for consumed messages. Here: the most messages one pull request asks for."""
    deliver_subject: str = Field("", alias="deliverSubject")
    """Conduit's push-consumer subject; a pull consumer has none: accepted, changes nothing."""
    deliver_policy: Literal["all", "new"] = Field("all", alias="deliverPolicy")
    ack_policy: Literal["explicit", "none", "all"] = Field("explicit", alias="ackPolicy")
    ack_wait: float = Field(60.0, alias="ackWait")
    """Extension: how long the server waits for the ack of a delivered message before it redelivers it
    (only when this connector creates the consumer). Longer than a micro-batch takes."""

    @field_validator("ack_wait", mode="before")
    @classmethod
    def _ack_wait(cls, value: Any) -> float:
        seconds = go_duration(str(value))
        if seconds < 1:
            raise ValueError("must be at least 1s (longer than a micro-batch takes)")
        return seconds


class NatsDestinationSettings(DestinationSettings, NatsConnectionSettings):
    """Publishes each record, in the record format, to ``subject`` (a JetStream stream must capture it)."""

    retry_wait: float = Field(5.0, alias="retryWait")
    retry_attempts: int = Field(3, gt=0, alias="retryAttempts")

    @field_validator("retry_wait", mode="before")
    @classmethod
    def _retry_wait(cls, value: Any) -> float:
        return go_duration(str(value))  # a negative duration is refused by the parser, as in Conduit


SOURCE = PluginSpec(
    "standalone:nats",
    "source",
    NatsSourceSettings,
    engine=_ENGINE_SOURCE,
    spark_source="conduit_nats",
    replays_identically=True,  # a batch is a range of stream sequences, read again by range
)
DESTINATION = PluginSpec(
    "standalone:nats",
    "destination",
    NatsDestinationSettings,
    engine=_ENGINE_DESTINATION,
    writes_on_stage=True,
)
