"""``standalone:rabbitmq`` source: consumes a queue with manual acks, acked after persist.

The driver-side stream reader (one per query, alive across its micro-batches) holds one AMQP channel
consuming ``queue.name`` with ``basic.qos`` prefetch and manual acks. ``latestOffset`` gathers delivered
messages (up to ``maxRecordsPerBatch``) and names the batch by its last delivery tag; ``partitions`` hands
the batch's messages, already as rows, to the executor inside the input partition. Messages are acked
(``basic.ack`` of the batch's last tag, ``multiple``) only once the batch is in Spark's commit log, i.e.
in every destination and the DLQ: in ``commit``, which Spark calls once it planned the next batch, and
earlier, when the reader finds the batch's commit in the checkpoint (so the last batch of a run is acked
too, and the unacked messages never fill the prefetch window while Spark waits for a next batch).

A crash drops the channel: RabbitMQ puts every unacked message back in the queue, and the next run gets
them again (``rabbitmq.redelivered: true``). RabbitMQ cannot give a batch's messages again by position, so
when Spark replays the crashed batch its offsets name messages of another consumer: that replay is empty
(the engine's decision log may still publish what the crashed attempt decided) and the messages come in
a later batch. At least once: a crash after a batch was published but before its ack reached the server
delivers its messages again.

Records: as Conduit's connector, operation ``create``, ``.Key`` the message id (raw), ``.Payload.After``
the body (raw), metadata ``rabbitmq.*`` from the message's properties and ``rabbitmq.header.<name>``.
``.Position`` is Conduit's ``{"deliveryTag", "queueName"}`` plus the reader's ``run`` id (delivery tags
restart on every channel): unique, and increasing within one run only.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_conduit.batch_log import SourceLag
from airflow_conduit.engine.connectors._stream import (
    SourceContext,
    parse_options,
    read_python_source,
    stop_requested,
)
from airflow_conduit.engine.connectors.rabbitmq._common import Server, classified, connect
from airflow_conduit.errors import Code

if TYPE_CHECKING:  # the module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings.rabbitmq import RabbitmqSourceSettings

logger = logging.getLogger("airflow_conduit.source.rabbitmq")

_GO_ZERO_TIME = "0001-01-01 00:00:00 +0000 UTC"  # how Conduit's connector prints a message without one
_PUMP_STEP = 0.05


@dataclass(frozen=True)
class Config:
    server: Server
    queue: str
    durable: bool
    auto_delete: bool
    exclusive: bool
    skip_declare: bool
    consumer_name: str
    consumer_exclusive: bool
    max_records: int
    prefetch: int
    idle_wait: float

    def __post_init__(self) -> None:
        if isinstance(self.server, dict):  # back from the JSON the options carry
            object.__setattr__(self, "server", Server(**self.server))

    @classmethod
    def from_settings(cls, settings: RabbitmqSourceSettings) -> Config:
        prefetch = settings.prefetch
        return cls(
            server=Server.of(settings),
            queue=settings.queue_name,
            durable=settings.queue_durable,
            auto_delete=settings.queue_auto_delete,
            exclusive=settings.queue_exclusive,
            skip_declare=settings.queue_skip_declare,
            consumer_name=settings.consumer_name,
            consumer_exclusive=settings.consumer_exclusive,
            # Half the prefetch window: the batch in flight and the next one fit in it together.
            max_records=min(settings.max_records_per_batch, prefetch // 2),
            prefetch=prefetch,
            idle_wait=settings.idle_wait,
        )


def _text(value: Any) -> str:
    """A property as Conduit's connector writes it (Go's ``%v``): absent is the zero value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _timestamp(seconds: int | None) -> str:
    if not seconds:
        return _GO_ZERO_TIME
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def message_row(queue: str, run: str, method: Any, props: Any, body: bytes) -> tuple:
    """One delivered message as a row of :data:`~airflow_conduit.record.SOURCE_SCHEMA`."""
    metadata = {
        "opencdc.readAt": str(time.time_ns()),
        "rabbitmq.queueName": queue,
        "rabbitmq.contentType": _text(props.content_type),
        "rabbitmq.contentEncoding": _text(props.content_encoding),
        "rabbitmq.deliveryMode": _text(props.delivery_mode or 0),
        "rabbitmq.priority": _text(props.priority or 0),
        "rabbitmq.correlationId": _text(props.correlation_id),
        "rabbitmq.replyTo": _text(props.reply_to),
        "rabbitmq.expiration": _text(props.expiration),
        "rabbitmq.timestamp": _timestamp(props.timestamp),
        "rabbitmq.type": _text(props.type),
        "rabbitmq.userId": _text(props.user_id),
        "rabbitmq.appId": _text(props.app_id),
        "rabbitmq.consumerTag": _text(method.consumer_tag),
        "rabbitmq.messageCount": "0",  # only basic.get tells it; a consumer's deliveries do not
        "rabbitmq.deliveryTag": _text(method.delivery_tag),
        "rabbitmq.redelivered": _text(bool(method.redelivered)),
        "rabbitmq.exchange": _text(method.exchange),
        "rabbitmq.routingKey": _text(method.routing_key),
    }
    for name, value in (props.headers or {}).items():
        metadata[f"rabbitmq.header.{name}"] = _text(value)
    position = json.dumps(
        {"deliveryTag": method.delivery_tag, "queueName": queue, "run": run}, separators=(",", ":")
    ).encode()
    key = props.message_id.encode() if props.message_id else None
    return (position, "create", metadata, None, key, None, None, None, bytes(body))


def offset(run: str, tag: int) -> dict:
    return {"run": run, "tag": tag}


@dataclass(frozen=True)
class _Messages(InputPartition):
    """One micro-batch's messages, as rows, carried to the executor (one partition: source order)."""

    rows: tuple[tuple, ...]


class RabbitmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        parsed = parse_options(options, Config)
        self.stop_file = parsed.stop_file
        self.config = parsed.config
        # The engine's state layout: the pipeline's stop file sits beside its Spark checkpoint.
        self.checkpoint = Path(self.stop_file).parent / "checkpoint" if self.stop_file else None
        self.run = uuid.uuid4().hex
        self._conn: Any = None
        self._channel: Any = None
        self._rows: dict[int, tuple] = {}  # delivery tag -> row, delivered and not yet acked
        self._planned = 0  # the last tag put in an offset
        self._acked = 0
        self._consuming = False
        self._available_now = False
        self._budget: int | None = None  # AvailableNow: messages this run may still plan

    # the channel, on the driver's Python worker
    def _context(self, what: str) -> Any:
        return classified(
            self.config.server.url, f"rabbitmq source {self.config.queue!r}: {what}", Code.SOURCE_FAILED
        )

    def _open(self) -> Any:
        if self._channel is not None:
            return self._channel
        config = self.config
        # No heartbeats: the channel sits idle while a batch runs, and a connection the server closed
        # for a missed heartbeat would requeue a batch that is about to commit.
        self._conn = connect(config.server, Code.SOURCE_FAILED, heartbeat=0)
        with self._context("cannot consume"):
            channel = self._conn.channel()
            channel.queue_declare(
                config.queue,
                passive=config.skip_declare,
                durable=config.durable,
                auto_delete=config.auto_delete,
                exclusive=config.exclusive,
            )
            channel.basic_qos(prefetch_count=config.prefetch)
        self._channel = channel
        return channel

    def _consume(self) -> None:
        """Start the consumer (after ``prepareForTriggerAvailableNow`` counted the queue: from now on
        the server moves up to ``prefetch`` messages from ready to unacked)."""
        if self._consuming:
            return
        config = self.config
        with self._context("cannot consume"):
            self._open().basic_consume(
                config.queue,
                self._delivered,
                auto_ack=False,
                exclusive=config.consumer_exclusive,
                consumer_tag=config.consumer_name or None,
            )
        self._consuming = True

    def _delivered(self, channel: Any, method: Any, props: Any, body: bytes) -> None:
        self._rows[method.delivery_tag] = message_row(self.config.queue, self.run, method, props, body)

    def _waiting(self) -> int:
        return sum(1 for tag in self._rows if tag > self._planned)

    def _pump(self, want: int) -> None:
        """Take deliveries until ``want`` wait to be planned, or none came for ``idle_wait`` seconds."""
        self._consume()
        with self._context("cannot read messages"):
            self._ack_committed()
            last_change, seen = time.monotonic(), self._waiting()
            while seen < want and time.monotonic() - last_change < self.config.idle_wait:
                self._conn.process_data_events(time_limit=_PUMP_STEP)
                now_seen = self._waiting()
                if now_seen != seen:
                    last_change, seen = time.monotonic(), now_seen

    def initialOffset(self) -> dict:
        return offset(self.run, 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        """An until-idle run takes the messages ready now (and redeliveries among them), no more."""
        self._available_now = True
        with self._context("cannot read the queue's depth"):
            self._open()
            declared = self._channel.queue_declare(self.config.queue, passive=True)
        self._budget = int(declared.method.message_count) + self._waiting()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if stop_requested(self.stop_file):
            return start
        want = min(
            self.config.max_records,
            limit.max_rows if isinstance(limit, ReadMaxRows) else self.config.max_records,
        )
        if self._budget is not None:
            want = min(want, self._budget)
            if want <= 0:
                self._ack_committed()
                return start
        self._pump(want)
        tags = sorted(tag for tag in self._rows if tag > self._planned)[:want]
        if not tags:
            return start
        self._planned = tags[-1]
        if self._budget is not None:
            self._budget -= len(tags)
        return offset(self.run, self._planned)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end.get("run") != self.run:
            # A batch planned by an earlier run, replayed: its messages went back to the queue when that
            # run's channel closed, and come again in a later batch.
            return [_Messages(())]
        low = int(start["tag"]) if start.get("run") == self.run else 0
        high = int(end["tag"])
        return [_Messages(tuple(self._rows[tag] for tag in sorted(self._rows) if low < tag <= high))]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, _Messages)
        yield from partition.rows

    def commit(self, end: dict) -> None:
        """Spark calls this once the batch ending at ``end`` is committed: ack its messages."""
        if end.get("run") == self.run:
            with self._context("cannot ack"):
                self._ack(int(end["tag"]))

    def _ack(self, tag: int) -> None:
        if tag <= self._acked or self._channel is None:
            return
        self._channel.basic_ack(delivery_tag=tag, multiple=True)
        for done in [t for t in self._rows if t <= tag]:
            del self._rows[done]
        self._acked = tag

    def _ack_committed(self) -> None:
        """Ack up to the last batch of this run in Spark's commit log (the checkpoint's ``commits``)."""
        tag = committed_tag(self.checkpoint, self.run) if self.checkpoint else None
        if tag is not None:
            self._ack(tag)

    def stop(self) -> None:
        try:
            if self._channel is not None:
                with self._context("cannot ack on stop"):
                    self._ack_committed()
        finally:
            conn, self._conn, self._channel, self._consuming = self._conn, None, None, False
            if conn is not None and conn.is_open:
                try:
                    conn.close()
                except Exception as error:  # closing a broken connection: nothing left to release
                    logger.debug("rabbitmq source: close failed: %s", type(error).__name__)


def committed_tag(checkpoint: Path, run: str) -> int | None:
    """The end tag of the last committed batch whose offset names ``run``; ``None``: none committed."""
    commits = checkpoint / "commits"
    try:
        ids = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)
    except FileNotFoundError:
        return None
    for batch_id in ids[:1]:  # the latest commit holds the highest tag of this run, if any
        try:
            lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        except FileNotFoundError:
            return None
        for line in lines[2:]:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and value.get("run") == run:
                return int(value["tag"])
    return None


class RabbitmqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_rabbitmq"

    def schema(self) -> str:
        from airflow_conduit.record import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return RabbitmqStreamReader(dict(self.options))


def read_stream(spark: SparkSession, settings: RabbitmqSourceSettings, ctx: SourceContext) -> DataFrame:
    return read_python_source(spark, RabbitmqDataSource, Config.from_settings(settings), ctx)


class QueueLag:
    """The queue's depth at the end of a batch: its ready messages (``queue.declare`` passive), on a
    connection of the engine's own kept for the run. Messages delivered to the reader but not yet acked
    (the next batch's) are not counted: they left the ready list."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._conn: Any = None
        self._channel: Any = None

    def lag(self, end: Any) -> SourceLag | None:
        try:
            if self._channel is None or not self._channel.is_open:
                self.close()
                self._conn = connect(self.config.server, Code.SOURCE_FAILED, heartbeat=0)
                self._channel = self._conn.channel()
            declared = self._channel.queue_declare(self.config.queue, passive=True)
        except BaseException:
            self.close()  # a fresh connection next time
            raise
        return SourceLag(float(declared.method.message_count), "messages")

    def close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception as error:  # a broken connection: nothing left to release
                logger.debug("rabbitmq lag: close failed: %s", type(error).__name__)


def lag_reader(settings: RabbitmqSourceSettings, ctx: SourceContext) -> QueueLag:
    return QueueLag(Config.from_settings(settings))
