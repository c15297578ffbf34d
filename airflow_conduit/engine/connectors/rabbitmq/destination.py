"""``standalone:rabbitmq`` destination: each record one message, published with publisher confirms.

``stage`` computes the messages (body in the destination's ``sdk.record.format``, routing key, headers,
message id) into Spark's cache; ``publish`` sends them from the driver, in order, on a channel in confirm
mode, and returns once the server confirmed every one (a nack, or with ``delivery.mandatory`` a message
no queue took, fails the batch: it is not committed and its source is not acked).

At least once: a message published is visible at once, and a batch that fails after part of it was
published (or whose commit a crash prevented) is published again on replay. Each message's
``message_id`` is the batch's delivery hash and the record's place in it (``<hash>-<seq>``), the same on
every replay of the batch, so a consumer can drop the copies. As Conduit's connector: the headers are the
record's ``rabbitmq.header.*`` metadata, the timestamp its ``opencdc.createdAt``, the body
``record.Bytes()`` (``opencdc/json`` by default), and the queue is declared (and bound to a declared
exchange) when the destination opens.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.connectors.rabbitmq._common import Server, classified, connect, safe_url
from airflow_conduit.engine.connectors.rabbitmq.confirms import ConfirmingChannel, Unconfirmed
from airflow_conduit.engine.connectors.record_format import serializer
from airflow_conduit.errors import Code, FatalError
from airflow_conduit.record import ORDER_COLUMNS, record_text_sql

if TYPE_CHECKING:
    from airflow_conduit.config.settings.rabbitmq import RabbitmqDestinationSettings
    from airflow_conduit.config.settings.record_format import RecordFormat

logger = logging.getLogger("airflow_conduit.destination.rabbitmq")

HEADER_PREFIX = "rabbitmq.header."
CREATED_AT = "opencdc.createdAt"
MESSAGE_SCHEMA = "body binary, routing_key string, headers string, message_id string, created_at bigint"


def _message_id(delivery_hash: str, seq: int, piece: list[int] | None) -> str:
    suffix = "".join(f".{i}" for i in piece) if piece else ""
    return f"{delivery_hash}-{seq}{suffix}"


def _created_at(metadata: dict[str, str]) -> int | None:
    """``opencdc.createdAt`` (Unix nanoseconds) as AMQP's timestamp (seconds); ``None`` if absent."""
    text = metadata.get(CREATED_AT, "")
    try:
        return int(text) // 1_000_000_000 if text else None
    except ValueError:
        return None


def _messages(
    record_format: RecordFormat, routing_key: str, delivery_hash: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Per record (on the executors): the message's body, routing key, headers, id and timestamp."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from airflow_conduit.engine.processors.custom_python import ArrowRecords
        from airflow_conduit.gotemplate import Template, TemplateExecError
        from airflow_conduit.gotemplate.opencdc import from_record_dict

        serialize = serializer(record_format)
        template = Template.parse(routing_key) if "{{" in routing_key else None
        for arrow_batch in batches:
            rows = ArrowRecords(arrow_batch)
            seqs = arrow_batch.column("_seq").to_pylist()
            has_pieces = "_piece" in arrow_batch.schema.names  # the DLQ's records have no pieces
            pieces = arrow_batch.column("_piece").to_pylist() if has_pieces else [None] * len(seqs)
            out: dict[str, list[Any]] = {
                name: [] for name in ("body", "routing_key", "headers", "message_id", "created_at")
            }
            for i in range(arrow_batch.num_rows):
                record = rows.record(i)
                metadata = dict(record.get("metadata") or {})
                key = routing_key
                if template is not None:
                    try:
                        key = template.execute(from_record_dict(record))
                    except TemplateExecError as error:
                        raise FatalError(
                            f"routingKey: the template failed on a record: {error}",
                            code=Code.DESTINATION_FAILED,
                        ) from None
                headers = {
                    k[len(HEADER_PREFIX) :]: v for k, v in metadata.items() if k.startswith(HEADER_PREFIX)
                }
                out["body"].append(serialize(record).encode())
                out["routing_key"].append(key)
                out["headers"].append(json.dumps(headers) if headers else None)
                out["message_id"].append(_message_id(delivery_hash, seqs[i], pieces[i]))
                out["created_at"].append(_created_at(metadata))
            yield pa.RecordBatch.from_pydict(out)

    return run


@dataclass(frozen=True)
class Target:
    """Where and how messages are published (the settings, as plain values)."""

    server: Server
    queue: str
    queue_durable: bool
    queue_auto_delete: bool
    queue_exclusive: bool
    queue_skip_declare: bool
    exchange: str
    exchange_type: str
    exchange_durable: bool
    exchange_auto_delete: bool
    exchange_internal: bool
    exchange_skip_declare: bool
    static_routing_key: str | None
    """The routing key when it is not a template (bound between a declared exchange and the queue)."""
    mandatory: bool
    properties: tuple[tuple[str, Any], ...]

    @classmethod
    def from_settings(cls, settings: RabbitmqDestinationSettings) -> Target:
        key = settings.routing_key
        return cls(
            server=Server.of(settings),
            queue=settings.queue_name,
            queue_durable=settings.queue_durable,
            queue_auto_delete=settings.queue_auto_delete,
            queue_exclusive=settings.queue_exclusive,
            queue_skip_declare=settings.queue_skip_declare,
            exchange=settings.exchange_name,
            exchange_type=settings.exchange_type,
            exchange_durable=settings.exchange_durable,
            exchange_auto_delete=settings.exchange_auto_delete,
            exchange_internal=settings.exchange_internal,
            exchange_skip_declare=settings.exchange_skip_declare,
            static_routing_key=None if "{{" in key else (key or settings.queue_name),
            mandatory=settings.delivery_mandatory,
            properties=(
                ("content_type", settings.delivery_content_type or None),
                ("content_encoding", settings.delivery_content_encoding or None),
                ("delivery_mode", settings.delivery_mode),
                ("priority", settings.delivery_priority),
                ("correlation_id", settings.delivery_correlation_id or None),
                ("reply_to", settings.delivery_reply_to or None),
                ("type", settings.delivery_message_type_name or None),
                ("user_id", settings.delivery_user_id or None),
                ("app_id", settings.delivery_app_id or None),
                ("expiration", settings.delivery_expiration or None),
            ),
        )


class _Publisher:
    """One confirming channel for one target, kept across batches (reopened when it broke)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._conn: Any = None
        self._channel: Any = None
        self._confirming: ConfirmingChannel | None = None

    def _alive(self) -> bool:
        """The channel is open, as far as a look at the socket tells (the server may have closed it
        while the pipeline was idle: a broker restart)."""
        if self._channel is None or not self._channel.is_open or not self._conn.is_open:
            return False
        try:
            self._conn.process_data_events(time_limit=0)
        except Exception:  # any failure here means: connect again
            return False
        return bool(self._channel.is_open)

    def channel(self) -> Any:
        if self._alive():
            return self._channel
        self.close()
        target = self.target
        # No heartbeats: between batches nothing services this connection, and a server that closed it
        # for missed heartbeats would fail the next batch for nothing.
        self._conn = connect(target.server, Code.DESTINATION_FAILED, heartbeat=0)
        with classified(
            target.server.url, self._context("cannot declare the queue or exchange"), Code.DESTINATION_FAILED
        ):
            channel = self._conn.channel()
            channel.queue_declare(
                target.queue,
                passive=target.queue_skip_declare,
                durable=target.queue_durable,
                auto_delete=target.queue_auto_delete,
                exclusive=target.queue_exclusive,
            )
            if target.exchange:
                if not target.exchange_skip_declare:
                    channel.exchange_declare(
                        target.exchange,
                        exchange_type=target.exchange_type,
                        durable=target.exchange_durable,
                        auto_delete=target.exchange_auto_delete,
                        internal=target.exchange_internal,
                    )
                    if target.static_routing_key is not None:
                        channel.queue_bind(
                            target.queue, target.exchange, routing_key=target.static_routing_key
                        )
                else:
                    channel.exchange_declare(target.exchange, passive=True)
            # Confirm mode last: the declarations above are not publishes.
            self._confirming = ConfirmingChannel.open(self._conn, channel)
        self._channel = channel
        return channel

    def _context(self, what: str) -> str:
        return f"rabbitmq destination {self.target.queue!r} at {safe_url(self.target.server.url)}: {what}"

    def publish(self, messages: DataFrame) -> int:
        import pika

        target = self.target
        base = dict(target.properties)
        count = 0
        self.channel()
        confirming = self._confirming
        assert confirming is not None
        with classified(target.server.url, self._context("cannot publish"), Code.DESTINATION_FAILED):
            try:
                for row in messages.toLocalIterator():
                    properties = pika.BasicProperties(
                        **base,
                        message_id=row.message_id,
                        headers=json.loads(row.headers) if row.headers else None,
                        timestamp=row.created_at,
                    )
                    key = target.static_routing_key
                    if key is None:
                        key = row.routing_key or target.queue
                    confirming.publish(target.exchange, key, bytes(row.body), properties, target.mandatory)
                    count += 1
                confirming.wait_all()
            except Unconfirmed as error:
                raise FatalError(
                    self._context(f"{error}: bind a queue for the routing key, or check the server's log"),
                    code=Code.DESTINATION_FAILED,
                ) from None
        return count

    def close(self) -> None:
        conn, self._conn, self._channel, self._confirming = self._conn, None, None, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception as error:  # a broken connection: nothing left to release
                logger.debug("rabbitmq destination: close failed: %s", type(error).__name__)


_publishers: dict[Target, _Publisher] = {}


@dataclass(frozen=True)
class StagedMessages:
    """The batch's messages in Spark's cache, published from the driver once the batch is decided."""

    messages: DataFrame
    publisher: _Publisher

    def publish(self) -> int:
        try:
            try:
                return self.publisher.publish(self.messages)
            except BaseException:
                self.publisher.close()  # a fresh channel next time, whatever state this one is in
                raise
        finally:
            self.messages.unpersist()

    def discard(self) -> None:
        """Nothing was published."""
        self.messages.unpersist()


def stage(records: DataFrame, settings: RabbitmqDestinationSettings, delivery: Delivery) -> StagedMessages:
    target = Target.from_settings(settings)
    publisher = _publishers.setdefault(target, _Publisher(target))
    publisher.channel()  # a missing queue or a bad password stops the batch before it is decided
    columns = [*record_text_sql(), *(c for c in ORDER_COLUMNS if c in records.columns)]
    mapper = _messages(settings.output_format, settings.routing_key, delivery.hash or delivery.generation)
    messages = records.selectExpr(*columns).mapInArrow(mapper, MESSAGE_SCHEMA).persist()
    messages.write.format("noop").mode("overwrite").save()
    return StagedMessages(messages, publisher)
