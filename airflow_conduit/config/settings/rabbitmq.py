"""``standalone:rabbitmq`` (Conduit's conduit-connector-rabbitmq), a source and a destination: their
settings and specs. Setting names and defaults are that connector's ``connector.yaml``."""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..spec import PluginSettings, PluginSpec
from ._common import DestinationSettings, GoTemplateText, RequiredStr, go_duration
from .sdk import SourceSdkSettings

NAME = "standalone:rabbitmq"
_ENGINE_SOURCE = "airflow_conduit.engine.connectors.rabbitmq.source"
_ENGINE_DESTINATION = "airflow_conduit.engine.connectors.rabbitmq.destination"
_AMQP_URL = re.compile(r"amqps?://\S*")
MAX_PREFETCH = 65_535
"""AMQP's ``basic.qos`` prefetch count is a 16-bit number."""
DEFAULT_ROUTING_KEY = '{{ index .Metadata "rabbitmq.routingKey" }}'
_STATIC_ROUTING_KEY = re.compile(r"[a-zA-Z0-9._\-]+")
_MAX_ROUTING_KEY = 255


class _Connection(PluginSettings):
    """What a source and a destination share: the server, TLS, the queue."""

    url: RequiredStr
    queue_name: RequiredStr = Field(alias="queue.name")
    queue_durable: bool = Field(True, alias="queue.durable")
    queue_auto_delete: bool = Field(False, alias="queue.autoDelete")
    queue_exclusive: bool = Field(False, alias="queue.exclusive")
    queue_no_wait: bool = Field(False, alias="queue.noWait")
    """Accepted: a declaration here always waits for the server (its answer tells a missing queue)."""
    queue_skip_declare: bool = Field(False, alias="queue.skipDeclare")
    """The queue must exist: it is checked (a passive declare), so a missing one is a clear error."""
    tls_enabled: bool = Field(False, alias="tls.enabled")
    tls_ca_cert: str = Field("", alias="tls.caCert")
    tls_client_cert: str = Field("", alias="tls.clientCert")
    tls_client_key: str = Field("", alias="tls.clientKey")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        value = value.strip()
        if not _AMQP_URL.fullmatch(value):
            # The value may hold a password: never echo it.
            raise ValueError("must be an AMQP URL like amqp://user:password@host:5672/vhost")
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> Any:
        if not self.tls_enabled:
            return self
        for key, path in (
            ("tls.caCert", self.tls_ca_cert),
            ("tls.clientCert", self.tls_client_cert),
            ("tls.clientKey", self.tls_client_key),
        ):
            if not path:
                raise ValueError(f"tls.enabled: {key} is required (a PEM file)")
            if not os.access(path, os.R_OK):
                raise ValueError(f"{key}: cannot read the file {path!r}")
        return self


class RabbitmqSourceSettings(SourceSdkSettings, _Connection):
    """Consumes ``queue.name`` with manual acks: a message is acked once its micro-batch committed."""

    consumer_auto_ack: bool = Field(False, alias="consumer.autoAck")
    consumer_exclusive: bool = Field(False, alias="consumer.exclusive")
    consumer_name: str = Field("", alias="consumer.name")
    consumer_no_local: bool = Field(False, alias="consumer.noLocal")
    """Accepted: RabbitMQ does not implement no-local (its documentation says so)."""
    consumer_no_wait: bool = Field(False, alias="consumer.noWait")
    """Accepted: the consumer is always registered waiting for the server."""
    idle_wait: float = Field(0.5, gt=0, alias="idleWait")
    """Extension: how long (a Go duration) a micro-batch waits for more messages to arrive before it
    goes ahead with fewer (an empty queue: the run is idle)."""

    @field_validator("idle_wait", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return go_duration(str(value))

    @field_validator("consumer_auto_ack")
    @classmethod
    def _refuse_auto_ack(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "true is not supported: a message is acked only after its micro-batch is in every "
                "destination (auto-ack would lose the batch in flight on a crash); remove it"
            )
        return value

    @property
    def prefetch(self) -> int:
        """The most unacked messages the server hands this consumer: two micro-batches (Spark acks a
        batch only once the next one is planned), within AMQP's limit."""
        return min(MAX_PREFETCH, 2 * self.max_records_per_batch)


class RabbitmqDestinationSettings(DestinationSettings, _Connection):
    """Publishes each record to ``exchange.name`` (default: the default exchange) with publisher
    confirms; the queue is declared (and bound to a named exchange) as Conduit's connector does."""

    exchange_name: str = Field("", alias="exchange.name")
    exchange_type: Literal["", "direct", "fanout", "topic", "headers"] = Field("", alias="exchange.type")
    exchange_durable: bool = Field(True, alias="exchange.durable")
    exchange_auto_delete: bool = Field(False, alias="exchange.autoDelete")
    exchange_internal: bool = Field(False, alias="exchange.internal")
    exchange_no_wait: bool = Field(False, alias="exchange.noWait")
    exchange_skip_declare: bool = Field(False, alias="exchange.skipDeclare")
    routing_key: GoTemplateText = Field(DEFAULT_ROUTING_KEY, alias="routingKey")
    """A static key, or a Go template over the record. Empty (the default template on a record
    without ``rabbitmq.routingKey``): ``queue.name``."""
    delivery_content_type: str = Field("application/json", alias="delivery.contentType")
    delivery_content_encoding: str = Field("", alias="delivery.contentEncoding")
    delivery_mode: int = Field(2, ge=1, le=2, alias="delivery.deliveryMode")
    """1: transient, 2: persistent."""
    delivery_priority: int = Field(0, ge=0, le=9, alias="delivery.priority")
    delivery_correlation_id: str = Field("", alias="delivery.correlationID")
    delivery_reply_to: str = Field("", alias="delivery.replyTo")
    delivery_message_type_name: str = Field("", alias="delivery.messageTypeName")
    delivery_user_id: str = Field("", alias="delivery.userID")
    delivery_app_id: str = Field("", alias="delivery.appID")
    delivery_mandatory: bool = Field(False, alias="delivery.mandatory")
    """A message no queue takes fails the batch (transient), rather than being dropped by the server."""
    delivery_immediate: bool = Field(False, alias="delivery.immediate")
    delivery_expiration: str = Field("", alias="delivery.expiration", pattern=r"^[0-9]*$")
    """Milliseconds, as RabbitMQ takes it (a number in a string)."""

    @field_validator("delivery_immediate")
    @classmethod
    def _refuse_immediate(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "true is not supported: RabbitMQ 3 does not implement the immediate flag (it closes the "
                "connection on such a publish); remove it"
            )
        return value

    @model_validator(mode="after")
    def _check_routing(self) -> RabbitmqDestinationSettings:
        if self.exchange_name and not self.exchange_type and not self.exchange_skip_declare:
            raise ValueError(
                "exchange.type is required to declare exchange.name (direct, fanout, topic or headers), "
                "or set exchange.skipDeclare: true for an existing exchange"
            )
        key = self.routing_key
        if "{{" not in key:
            if key and not _STATIC_ROUTING_KEY.fullmatch(key):
                raise ValueError(
                    "routingKey: neither a valid static RabbitMQ routing key (letters, digits, '.', '_', '-') "
                    "nor a Go template"
                )
            if len(key) > _MAX_ROUTING_KEY:
                raise ValueError(f"routingKey: too long (at most {_MAX_ROUTING_KEY} characters)")
        return self


SOURCE = PluginSpec(
    NAME,
    "source",
    RabbitmqSourceSettings,
    engine=_ENGINE_SOURCE,
    spark_source="conduit_rabbitmq",
    # A replayed batch cannot be read again by position: its messages were requeued by the server
    # and arrive again in a later batch (the engine stores a batch's decision instead).
    replays_identically=False,
)
DESTINATION = PluginSpec(NAME, "destination", RabbitmqDestinationSettings, engine=_ENGINE_DESTINATION)
