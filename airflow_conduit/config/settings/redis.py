"""``standalone:redis`` (Conduit's ``conduit-connector-redis``), a source and a destination over a Redis
stream: their settings and specs.

Keys keep the standalone connector's spelling (``redis.host``, ``redis.key``, ``mode``,
``pollingPeriod``). Only ``mode: stream`` runs here: a pub/sub channel keeps nothing, so a message cannot
be acknowledged after the batch that holds it is persisted, nor read again after a crash.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator

from ..spec import PluginSettings, PluginSpec
from ._common import DestinationSettings, RequiredStr
from ._duration import go_duration
from .sdk import SourceSdkSettings

PLUGIN = "standalone:redis"
_SOURCE_ENGINE = "airflow_conduit.engine.connectors.redis_streams.source"
_DESTINATION_ENGINE = "airflow_conduit.engine.connectors.redis_streams.destination"

_PUBSUB_REFUSED = (
    "only mode 'stream' is supported (pubsub is the Conduit connector's default, so a file without "
    "`mode` means pubsub): a pub/sub channel keeps no message, so one cannot be acknowledged after the "
    "batch that holds it is persisted, nor read again after a crash; use a Redis stream and set "
    "mode: stream"
)


class RedisConnection(PluginSettings):
    """How to reach the server and which key, as the Conduit connector names them."""

    host: str = Field("localhost", alias="redis.host", min_length=1)
    port: int = Field(6379, alias="redis.port", ge=1, le=65535)
    key: RequiredStr = Field(alias="redis.key")
    """The stream's key."""
    database: int = Field(0, alias="redis.database", ge=0)
    username: str = Field("", alias="redis.username")
    password: str = Field("", alias="redis.password", repr=False)
    mode: str = Field("pubsub", validate_default=True)
    """Conduit's default is ``pubsub``, refused here: a file that leaves ``mode`` out is told so rather
    than read as a stream, so that its meaning does not change silently."""

    @field_validator("mode")
    @classmethod
    def _stream_only(cls, value: str) -> str:
        if value.strip() != "stream":
            raise ValueError(_PUBSUB_REFUSED)
        return "stream"


class RedisSourceSettings(SourceSdkSettings, RedisConnection):
    """A consumer group on the stream: entries are acknowledged (``XACK``) once their batch committed."""

    polling_period: float = Field(1.0, alias="pollingPeriod")
    """How long to wait after finding no new entry before asking again."""
    consumer_group: str = Field("", alias="consumerGroup")
    """Extension: the consumer group (created at the stream's start if missing). Empty:
    ``conduit-<pipeline id>-<connector id>``."""
    consumer_name: str = Field("", alias="consumerName")
    """Extension: this reader's name in the group. Empty: ``<pipeline id>:<connector id>``."""

    @field_validator("polling_period", mode="before")
    @classmethod
    def _check_period(cls, value: Any) -> float:
        seconds = go_duration(str(value))
        if seconds <= 0:
            raise ValueError("must be a positive Go duration (e.g. 1s, 500ms)")
        return seconds


class RedisDestinationSettings(DestinationSettings, RedisConnection):
    """``XADD`` of each record's ``payload.after`` fields; exactly once through a delivery marker
    written in the same ``MULTI``/``EXEC``."""

    RECORD_FORMAT_REFUSED: ClassVar[str] = (
        "standalone:redis writes the fields of the record's payload.after as the stream entry's fields, "
        "not a serialized record (Conduit's redis destination ignores sdk.record.format too); remove "
        "the setting"
    )


SOURCE = PluginSpec(
    PLUGIN,
    "source",
    RedisSourceSettings,
    engine=_SOURCE_ENGINE,
    spark_source="conduit_redis",
    # A batch is the stream's entries in an id range (XRANGE): the same entries whenever it is read
    # again, unless someone deletes or trims them in between.
    replays_identically=True,
)
DESTINATION = PluginSpec(
    PLUGIN,
    "destination",
    RedisDestinationSettings,
    engine=_DESTINATION_ENGINE,
    delivery_marker=True,  # in the same MULTI/EXEC as the entries
)
