"""``standalone:nats`` source: a JetStream stream read through a durable pull consumer, each message
acknowledged only after the micro-batch holding it committed in every destination.

Where things happen:

- the driver (``latestOffset``, ``commit``) pulls from the durable consumer, headers only (no bodies
  cross twice), which tells it which stream sequences exist and gives it the messages' ack handles. A
  micro-batch is a range of stream sequences ``(start, end]``; its end is at most ``maxRecordsPerBatch``
  sequences past its start (so never more messages than that).
- the executors (``read``) read the bodies of their piece of the range through a short-lived ephemeral
  consumer that starts at the piece's first sequence: by range, so a batch Spark replays after a crash
  (from its offset log, on a fresh reader) yields the same messages again.
- ``commit(end)``, called by Spark once every destination holds the batch, acks the held messages up to
  ``end`` (``ackPolicy: all``: the last one, which acks all before it). Nothing is acked earlier; a crash
  leaves the batch's messages pending, and the next run reads them by range (the durable's delivered
  sequence marks how far earlier runs pulled) and acks them with its first commit past them; with
  ``ackPolicy: explicit`` an ack needs the message's own delivery, so those pulled by a crashed run are
  acked once the server redelivers them (after ``ackWait``), not before: by the first pull after that,
  or a short fetch for them alone when there is nothing new to pull.

A record's position is its stream sequence (decimal text); its metadata ``opencdc.createdAt`` (the
message's time, as Conduit's connector sets it); its payload the message data, raw.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_conduit.batch_log import SourceLag
from airflow_conduit.engine.connectors._stream import (
    SourceContext,
    parse_options,
    read_python_source,
    source_options,
    stop_requested,
)
from airflow_conduit.engine.connectors.nats._common import (
    REQUEST_TIMEOUT,
    Connection,
    LoopThread,
    classify,
    nats_errors,
)
from airflow_conduit.errors import Code, ConduitError, FatalError, TransientError
from airflow_conduit.record import source_schema

if TYPE_CHECKING:
    from airflow_conduit.config.settings.nats import NatsSourceSettings

SCHEMA = source_schema("position", "metadata", "after_raw")
_ARROW_SCHEMA = pa.schema(
    [("position", pa.binary()), ("metadata", pa.map_(pa.string(), pa.string())), ("after_raw", pa.binary())]
)
CREATED_AT = "opencdc.createdAt"
MIN_PIECE = 2_000
"""Fewest stream sequences worth a partition of their own."""
RANGE_FETCH = 5_000
IDLE_WAIT = 0.5
"""Seconds a pull waits for new messages when none are there (a long poll, once per trigger)."""
ORPHAN_WAIT = 0.05
"""Seconds a fetch for an earlier run's unacked messages alone waits: those due come at once."""
_DURABLE_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_CODE = Code.SOURCE_FAILED


def durable_name(settings: NatsSourceSettings, ctx: SourceContext) -> str:
    """The durable consumer the source reads through: ``durable``, else one named after the node (the
    reader and the lag reader must name the same one)."""
    return settings.durable or _DURABLE_UNSAFE.sub("_", f"conduit-{ctx.node_id}")


@dataclass(frozen=True)
class NatsSource(Connection):
    """What the stream reader needs of the settings (a plain dataclass: see ``_stream.source_options``)."""

    stream: str = ""
    subject: str = ""
    durable: str = ""
    deliver_policy: str = "all"
    ack_policy: str = "explicit"
    ack_wait: float = 60.0
    pull_size: int = 1024
    max_records: int = 250_000

    @classmethod
    def for_source(cls, settings: NatsSourceSettings, ctx: SourceContext) -> NatsSource:
        connection = Connection.from_settings(settings, ctx.connector_id)
        return cls(
            **{name: getattr(connection, name) for name in Connection.__dataclass_fields__},
            stream=settings.stream,
            subject=settings.subject,
            durable=durable_name(settings, ctx),
            deliver_policy=settings.deliver_policy,
            ack_policy=settings.ack_policy,
            ack_wait=settings.ack_wait,
            pull_size=settings.buffer_size,
            max_records=settings.max_records_per_batch,
        )


@dataclass(frozen=True)
class _Range(InputPartition):
    first: int
    last: int
    """Stream sequences, both included."""


def _reply_fields(reply: str) -> tuple[int, str, int]:
    """Stream sequence, timestamp (ns) and pending count from a JetStream message's ack subject
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``; the newer form adds the
    domain and account hash after ``ACK`` and a token at the end)."""
    tokens = reply.split(".")
    at = 5 if len(tokens) == 9 else 7
    return int(tokens[at]), tokens[at + 2], int(tokens[at + 3])


class NatsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        parsed = parse_options(options, NatsSource)
        self.stop_file, self.parallelism = parsed.stop_file, parsed.parallelism
        self.config = parsed.config
        self._init_driver_state()

    def _init_driver_state(self) -> None:
        self._loop: LoopThread | None = None
        self._client: Any = None
        self._pull: Any = None
        self._ack_all = self.config.ack_policy == "all"
        self._ack_none = self.config.ack_policy == "none"
        self._held: dict[int, Any] = {}  # stream sequence -> delivered, unacked message (its ack handle)
        self._start = 0  # the durable consumer's ack floor when it was opened
        self._frontier = 0  # the highest stream sequence the durable consumer delivered
        self._orphans = 0  # delivered to an earlier run (or connection), never acked: due back after ackWait
        self._target: int | None = None  # AvailableNow: the stream's last sequence when the run began

    # The reader is pickled to the executors: none of the driver's connection goes with it.
    def __getstate__(self) -> dict[str, Any]:
        return {"stop_file": self.stop_file, "parallelism": self.parallelism, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_driver_state()

    # driver side ----------------------------------------------------------------------------------
    def _run(self, work: Any, context: str) -> Any:
        if self._loop is None:
            self._loop = LoopThread()
        try:
            return self._loop.run(work)
        except ConduitError as error:
            if isinstance(error, TransientError):
                self._drop_connection()
            raise
        except nats_errors() as error:
            self._drop_connection()
            raise classify(error, self.config, f"nats source: {context}", _CODE) from None

    def _drop_connection(self) -> None:
        client, self._client, self._pull = self._client, None, None
        self._held.clear()  # their ack handles die with the connection; the server redelivers them
        if client is not None and self._loop is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing to save
                self._loop.run(client.close(), timeout=10)

    async def _ensure(self) -> Any:
        """The durable pull subscription, made on first use (creating the consumer if it is missing)."""
        if self._pull is not None:
            if not self._client.is_connected:
                raise TransientError(
                    f"nats source: lost the connection to NATS at {self.config.shown}", code=_CODE
                )
            return self._pull
        import nats.js.errors as jerr
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        config = self.config
        client = await config.connect(reconnect=True, code=_CODE)
        self._client = client
        js = client.jetstream(timeout=REQUEST_TIMEOUT)
        try:
            await js.stream_info(config.stream)
        except jerr.NotFoundError:
            raise FatalError(
                f"nats source: stream {config.stream!r} does not exist on {config.shown}: create it (e.g. "
                f"`nats stream add {config.stream} --subjects '{config.subject}'`) or fix the `stream` setting",
                code=_CODE,
            ) from None
        try:
            info = await js.consumer_info(config.stream, config.durable)
        except jerr.NotFoundError:
            wanted = ConsumerConfig(
                durable_name=config.durable,
                filter_subject=config.subject,
                deliver_policy=DeliverPolicy.NEW if config.deliver_policy == "new" else DeliverPolicy.ALL,
                ack_policy=AckPolicy(config.ack_policy),
                ack_wait=config.ack_wait,
                max_ack_pending=-1,  # a micro-batch holds its messages unacked until it commits
                headers_only=True,  # the driver needs sequences and ack handles, not bodies
            )
            info = await js.add_consumer(config.stream, wanted)
        subject = info.config.filter_subject
        if subject and subject != config.subject:
            raise FatalError(
                f"nats source: the durable consumer {config.durable!r} of stream {config.stream!r} reads "
                f"subject {subject!r}, not {config.subject!r}: set `durable` to another name or `subject` "
                f"to {subject!r}",
                code=_CODE,
            )
        policy = str(getattr(info.config.ack_policy, "value", info.config.ack_policy))
        self._ack_all, self._ack_none = policy == "all", policy == "none"
        self._frontier = max(self._frontier, int(info.delivered.stream_seq or 0))
        self._start = int(info.ack_floor.stream_seq or 0)
        # Only an explicit ack needs each message's own delivery; under ``all`` the next ack covers them,
        # and acking a redelivery (a newer delivery) would also ack newer, uncommitted ones.
        self._orphans = int(info.num_ack_pending or 0) if policy == "explicit" else 0
        self._pull = await js.pull_subscribe_bind(config.durable, stream=config.stream)
        return self._pull

    def initialOffset(self) -> dict:
        """A new checkpoint starts after the durable consumer's ack floor: what an earlier run (or
        Conduit) acked is done, the rest is read (with ``deliverPolicy`` deciding for a new consumer)."""
        self._run(self._ensure(), "cannot open the durable consumer")
        return {"seq": self._start}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        async def last_sequence() -> int:
            await self._ensure()
            info = await self._client.jetstream(timeout=REQUEST_TIMEOUT).stream_info(self.config.stream)
            return int(info.state.last_seq)

        self._target = self._run(last_sequence(), "cannot read the stream's state")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        first = int(start["seq"])
        # Spark asks for the next batch only once the batch ending at ``start`` committed, but calls
        # ``commit`` for a batch only when it starts the next one: the last batch of a run is acked here.
        self._ack_up_to(first)
        if stop_requested(self.stop_file):
            return start
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else self.config.max_records
        ceiling = first + budget if self._target is None else min(first + budget, self._target)
        self._run(self._pull_up_to(ceiling), "cannot pull from the durable consumer")
        if not self._ack_all:  # under ``all`` see ``_ensure``
            self._ack_up_to(first)  # what the pull brought back of committed messages (an earlier run's)
        return {"seq": max(first, min(self._frontier, ceiling))}

    async def _pull_up_to(self, ceiling: int) -> None:
        """Pull from the durable consumer until it delivered up to ``ceiling`` or has nothing more."""
        pull = await self._ensure()
        # Messages an earlier run pulled but never acked come back after ackWait, ahead of new ones: a
        # pull collects those due on its way, and with nothing new to pull one short fetch still does,
        # so a committed message is not left pending for some later run to ack.
        if self._frontier >= ceiling and self._orphans > 0:
            await self._fetch(pull, min(self.config.pull_size, self._orphans), ORPHAN_WAIT)
        while self._frontier < ceiling:
            ask = min(self.config.pull_size, ceiling - self._frontier)
            if await self._fetch(pull, ask, IDLE_WAIT) < ask:
                return

    async def _fetch(self, pull: Any, ask: int, wait: float) -> int:
        """Up to ``ask`` messages from the durable consumer, held for their acks; how many came."""
        import nats.errors as nerr

        try:
            messages = await pull.fetch(ask, timeout=wait)
        except nerr.TimeoutError:
            if not self._client.is_connected:
                raise TransientError(
                    f"nats source: lost the connection to NATS at {self.config.shown}", code=_CODE
                ) from None
            return 0
        for message in messages:
            seq = _reply_fields(message.reply)[0]
            if seq <= self._frontier and seq not in self._held:
                self._orphans = max(0, self._orphans - 1)
            self._frontier = max(self._frontier, seq)
            if not self._ack_none:
                self._held[seq] = message  # a redelivery replaces the older handle
        return len(messages)

    def commit(self, end: dict) -> None:
        """Spark calls this once the batch ending at ``end`` is committed (every destination and the
        DLQ hold it): only now are its messages acknowledged."""
        self._ack_up_to(int(end["seq"]))

    def _ack_up_to(self, last: int) -> None:
        done = sorted(seq for seq in self._held if seq <= last)
        if not done:
            return
        acking = [self._held[done[-1]]] if self._ack_all else [self._held[seq] for seq in done]

        async def ack() -> None:
            await self._ensure()
            for message in acking:
                await message.ack()
            await self._client.flush(timeout=REQUEST_TIMEOUT)

        self._run(ack(), f"cannot acknowledge the messages up to stream sequence {last}")
        for seq in done:
            del self._held[seq]

    def stop(self) -> None:
        """Messages pulled past the last commit go back at once (as Conduit's connector naks them), so
        the next run need not wait ``ackWait`` for them; then the connection and its loop close."""
        if self._loop is None:
            return
        held, self._held = list(self._held.values()), {}
        client = self._client

        async def give_back() -> None:
            if client is not None and client.is_connected:
                for message in held:
                    await message.nak()
                await client.flush(timeout=REQUEST_TIMEOUT)

        with contextlib.suppress(Exception):  # unacked messages come back after ackWait anyway
            self._loop.run(give_back(), timeout=30)
        self._drop_connection()
        self._loop.close()
        self._loop = None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, last = int(start["seq"]) + 1, int(end["seq"])
        if last < first:
            return []
        count = max(1, min(self.parallelism, (last - first + 1) // MIN_PIECE))
        step = -(-(last - first + 1) // count)
        return [_Range(a, min(a + step - 1, last)) for a in range(first, last + 1, step)]

    # executor side --------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        try:
            batches = asyncio.run(self._read_range(partition))
        except ConduitError:
            raise
        except nats_errors() as error:
            context = f"nats source: cannot read stream sequences {partition.first}-{partition.last}"
            raise classify(error, self.config, context, _CODE) from None
        yield from batches

    async def _read_range(self, partition: _Range) -> list[pa.RecordBatch]:
        import nats.errors as nerr
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        config = self.config
        client = await config.connect(reconnect=False, code=_CODE)
        try:
            js = client.jetstream(timeout=REQUEST_TIMEOUT)
            reader = ConsumerConfig(
                ack_policy=AckPolicy.NONE,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=partition.first,
                filter_subject=config.subject,
                inactive_threshold=60.0,
                mem_storage=True,
            )
            sub = await js.pull_subscribe(config.subject, stream=config.stream, config=reader)
            info = await sub.consumer_info()
            pending = int(info.num_pending)
            batches: list[pa.RecordBatch] = []
            seq = partition.first - 1
            while pending > 0 and seq < partition.last:
                try:
                    messages = await sub.fetch(min(RANGE_FETCH, pending), timeout=REQUEST_TIMEOUT)
                except nerr.TimeoutError:
                    raise TransientError(
                        f"nats source: timed out reading stream {config.stream!r} at sequence {seq + 1}",
                        code=_CODE,
                    ) from None
                positions, metadata, bodies = [], [], []
                for message in messages:
                    seq, created, pending = _reply_fields(message.reply)
                    if seq > partition.last:
                        break
                    positions.append(str(seq).encode())
                    metadata.append([(CREATED_AT, created)])
                    bodies.append(message.data)
                if positions:
                    arrays = [
                        pa.array(positions, pa.binary()),
                        pa.array(metadata, _ARROW_SCHEMA.field(1).type),
                    ]
                    arrays.append(pa.array(bodies, pa.binary()))
                    batches.append(pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA))
            with contextlib.suppress(Exception):  # it goes by itself after inactive_threshold
                await js.delete_consumer(config.stream, info.name)
            return batches
        finally:
            await client.close()


class NatsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_nats"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return NatsStreamReader(dict(self.options))


class ConsumerLag:
    """The durable consumer's ``num_pending`` at the end of a batch: the stream's messages on its
    subject past the last one the consumer delivered. The driver pulls up to each batch's end, so that
    is what lies behind the batch; messages delivered past the end are left out until a batch holds
    them (a pull over a subject with gaps in its stream sequences may overshoot the end, and a crashed
    run may have pulled further). On a connection of the engine's own, kept for the run, in a loop
    thread of its own (nats-py is asyncio)."""

    def __init__(self, config: NatsSource) -> None:
        self.config = config
        self._loop: LoopThread | None = None
        self._client: Any = None

    def lag(self, end: Any) -> SourceLag | None:
        if self._loop is None:
            self._loop = LoopThread()
        try:
            info = self._loop.run(self._consumer_info(), timeout=60)
        except nats_errors() as error:
            self._drop_connection()
            raise classify(
                error, self.config, "nats source: cannot read the consumer's state", _CODE
            ) from None
        except BaseException:
            self._drop_connection()  # a fresh connection next time
            raise
        return SourceLag(float(info.num_pending), "messages")

    async def _consumer_info(self) -> Any:
        if self._client is None or not self._client.is_connected:
            if self._client is not None:
                with contextlib.suppress(Exception):  # a broken connection: nothing to save
                    await self._client.close()
            self._client = None
            # No reconnect: a lost connection fails this point and the next batch connects afresh.
            self._client = await self.config.connect(reconnect=False, code=_CODE)
        js = self._client.jetstream(timeout=REQUEST_TIMEOUT)
        return await js.consumer_info(self.config.stream, self.config.durable)

    def _drop_connection(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: nothing to save
                self._loop.run(client.close(), timeout=10)

    def close(self) -> None:
        if self._loop is None:
            return
        self._drop_connection()
        self._loop.close()
        self._loop = None


def lag_reader(settings: NatsSourceSettings, ctx: SourceContext) -> ConsumerLag:
    return ConsumerLag(NatsSource.for_source(settings, ctx))


def read_stream(spark: SparkSession, settings: NatsSourceSettings, ctx: SourceContext) -> DataFrame:
    config = NatsSource.for_source(settings, ctx)
    return read_python_source(spark, NatsDataSource, config, ctx, schema=SCHEMA)


def stream_reader(settings: NatsSourceSettings, ctx: SourceContext) -> NatsStreamReader:
    return NatsStreamReader(source_options(NatsSource.for_source(settings, ctx), ctx))
