"""``standalone:redis`` source (``mode: stream``): a Redis stream read through a consumer group, each
entry acknowledged (``XACK``) only after the micro-batch that holds it committed.

Offsets are stream entry ids: ``{"id": LAST}``, the last entry a batch holds. On the driver,
``latestOffset`` takes the next entries for the group (``XREADGROUP ... >``, at most
``maxRecordsPerBatch``): they become pending for this consumer, and the batch ends at the last one.
Executors read the batch again by range (``XRANGE key (START END``), so a batch replayed after a crash
gives the same entries. ``commit`` (Spark calls it once every destination and the DLQ hold the batch)
acknowledges every pending entry up to the batch's end: never before.

After a crash, entries the group handed out but no committed batch held are still pending: the next
batch takes this consumer's pending entries past its start first (``XREADGROUP ... START``). A new
checkpoint starts where the group stands: before its oldest pending entry, else after the last entry it
delivered; a group that does not exist is created at the stream's beginning (Conduit's connector reads
from ``0-0``).

Records as the Conduit connector makes them: operation ``create``, position the entry id, key the
stream's key (raw), ``payload.after`` the entry's fields as a JSON object (raw), metadata ``key`` (the
stream's key) and ``opencdc.createdAt`` (the id's milliseconds, in nanoseconds).
"""

from __future__ import annotations

import json
import time
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
    stop_requested,
)
from airflow_conduit.engine.connectors.redis_streams._common import Server, check_stream, classified, connect
from airflow_conduit.errors import Code
from airflow_conduit.record import source_schema

if TYPE_CHECKING:  # the module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings.redis import RedisSourceSettings

START_ID = "0-0"
READ_CHUNK = 10_000
"""Entries per round trip while an executor reads a batch, or the driver acknowledges one."""
_MAX_SEQ = (1 << 64) - 1


def parse_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def before(entry_id: str) -> str:
    """The id just before ``entry_id``: a batch's start is exclusive, so this starts *at* an entry."""
    ms, seq = parse_id(entry_id)
    if seq > 0:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{_MAX_SEQ}" if ms > 0 else START_ID


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def group_name(settings: RedisSourceSettings, ctx: SourceContext) -> str:
    """The consumer group the source reads through: ``consumerGroup``, else one named after the
    pipeline and the connector (the reader and the lag reader must name the same one)."""
    pipeline, _, connector = ctx.node_id.rpartition(":")
    return settings.consumer_group or f"conduit-{pipeline or 'pipeline'}-{connector}"


@dataclass(frozen=True)
class Config:
    """The source's settings as plain values (JSON to the Python workers)."""

    server: dict[str, Any]
    group: str
    consumer: str
    polling_period: float
    max_records: int

    @classmethod
    def of(cls, settings: RedisSourceSettings, ctx: SourceContext) -> Config:
        return cls(
            server=Server.of(settings).__dict__,
            group=group_name(settings, ctx),
            consumer=settings.consumer_name or ctx.node_id,
            polling_period=settings.polling_period,
            max_records=settings.max_records_per_batch,
        )

    @property
    def stream(self) -> Server:
        return Server(**self.server)


@dataclass(frozen=True)
class _Range(InputPartition):
    """One batch: the entries after ``start`` up to ``end`` (one partition keeps them in order)."""

    server: dict[str, Any]
    start: str
    end: str


class RedisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        parsed = parse_options(options, Config)
        self.stop_file = parsed.stop_file
        self.config = parsed.config
        self.server = self.config.stream
        self._client: Any = None
        self._group_ready = False
        self._available_now = False
        self._target: str | None = None  # AvailableNow: the stream's last id when the run began
        self._last_empty_poll = 0.0
        self._acked: str | None = None  # acknowledged up to here by this reader

    def _redis(self, context: str) -> Any:
        """The driver's client, in a block whose Redis errors come out classified."""
        return classified(self.server, f"redis source: {context}", Code.SOURCE_FAILED)

    def _db(self) -> Any:
        if self._client is None:
            self._client = connect(self.server, Code.SOURCE_FAILED)
        if not self._group_ready:
            check_stream(self._client, self.server, Code.SOURCE_FAILED)
            self._ensure_group(self._client)
            self._group_ready = True
        return self._client

    def _drop_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _ensure_group(self, client: Any) -> None:
        import redis.exceptions as rex

        try:  # MKSTREAM: a stream that does not exist yet is created empty, as XADD would
            client.xgroup_create(self.server.key, self.config.group, id=START_ID, mkstream=True)
        except rex.ResponseError as error:
            if not str(error).startswith("BUSYGROUP"):
                raise

    def _call(self, context: str, work: Any) -> Any:
        try:
            with self._redis(context):
                return work(self._db())
        except BaseException:
            self._drop_client()  # a fresh connection next time, whatever state this one is in
            raise

    def stop(self) -> None:
        self._drop_client()

    def initialOffset(self) -> dict:
        return {"id": self._call("cannot start", self._resume_id)}

    def _resume_id(self, client: Any) -> str:
        """Where a new checkpoint starts: before the group's oldest pending entry (handed out, never
        acknowledged), else after the last entry the group delivered."""
        key, group = self.server.key, self.config.group
        pending = client.xpending(key, group)
        if pending and int(pending.get("pending") or 0) > 0:
            return before(_text(pending["min"]))
        for info in client.xinfo_groups(key):
            if _text(info.get("name")) == group:
                return _text(info.get("last-delivered-id") or START_ID)
        return START_ID

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

        def last_id(client: Any) -> str:
            newest = client.xrevrange(self.server.key, "+", "-", count=1)
            return _text(newest[0][0]) if newest else START_ID

        self._target = self._call("cannot read the stream's last entry", last_id)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # Spark runs one batch at a time: it asks for the next end only once the batch ending at
        # ``start`` committed. Its own ``commit`` call for that batch comes only when it plans a next
        # batch with data, so without this the last batch of a run would stay pending until a later one.
        self._ack_upto(start["id"])
        if stop_requested(self.stop_file):
            return start
        now = time.monotonic()
        if not self._available_now and now - self._last_empty_poll < self.config.polling_period:
            return start
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else self.config.max_records
        ids = self._call("cannot read new entries", lambda client: self._claim(client, start["id"], budget))
        if self._available_now and self._target is not None:
            # Entries added after the run began stay pending for the next run (it takes them first).
            target = parse_id(self._target)
            ids = [i for i in ids if parse_id(i) <= target]
        if not ids:
            self._last_empty_poll = now
            return start
        return {"id": ids[-1]}

    def _claim(self, client: Any, after: str, budget: int) -> list[str]:
        """The ids of the next batch, pending for this consumer once this returns: first what the group
        handed this consumer past ``after`` without a batch holding it (a crash between this call and
        Spark's offset log), else new entries."""
        key, group, consumer = self.server.key, self.config.group, self.config.consumer
        for since in (after, ">"):
            reply = client.xreadgroup(group, consumer, {key: since}, count=budget)
            entries = reply[0][1] if reply else []
            if entries:
                return [_text(entry_id) for entry_id, _ in entries]
        return []

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start["id"] == end["id"]:
            return []
        return [_Range(self.config.server, start["id"], end["id"])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        server = Server(**partition.server)
        client: Any = connect(server, Code.SOURCE_FAILED)
        try:
            with classified(server, "redis source: cannot read a batch", Code.SOURCE_FAILED):
                after = partition.start
                while True:
                    entries = client.xrange(server.key, f"({after}", partition.end, count=READ_CHUNK)
                    if entries:
                        yield _records(server.key, entries)
                    if len(entries) < READ_CHUNK:
                        return
                    after = _text(entries[-1][0])
        finally:
            client.close()

    def commit(self, end: dict) -> None:
        """Spark calls this once the batch ending at ``end`` is committed (every destination and the DLQ
        hold it): only now are its entries acknowledged."""
        self._ack_upto(end["id"])

    def _ack_upto(self, upto: str) -> None:
        if self._acked is not None and parse_id(upto) <= parse_id(self._acked):
            return
        self._call(f"cannot acknowledge entries up to {upto}", lambda client: self._ack(client, upto))
        self._acked = upto

    def _ack(self, client: Any, upto: str) -> None:
        key, group = self.server.key, self.config.group
        while True:
            pending = client.xpending_range(key, group, min="-", max=upto, count=READ_CHUNK)
            if not pending:
                return
            client.xack(key, group, *(p["message_id"] for p in pending))
            if len(pending) < READ_CHUNK:
                return


COLUMNS = ("position", "operation", "metadata", "key_raw", "after_raw")
SCHEMA = source_schema(*COLUMNS)
"""The columns this source fills (the engine fills in the others)."""
_ARROW_SCHEMA = pa.schema(
    [
        ("position", pa.binary()),
        ("operation", pa.string()),
        ("metadata", pa.map_(pa.string(), pa.string())),
        ("key_raw", pa.binary()),
        ("after_raw", pa.binary()),
    ]
)


def _records(key: str, entries: list) -> pa.RecordBatch:
    """Entries as records, as Arrow: Spark takes them without converting row by row."""
    positions, metadata, payloads = [], [], []
    for entry_id, fields in entries:
        position = _text(entry_id)
        positions.append(position.encode())
        created = str(parse_id(position)[0] * 1_000_000)
        metadata.append([("key", key), ("opencdc.createdAt", created)])
        after = {_text(name): _text(value) for name, value in fields.items()}
        payloads.append(json.dumps(after, separators=(",", ":"), ensure_ascii=False).encode())
    count = len(positions)
    arrays = [
        pa.array(positions, pa.binary()),
        pa.array(["create"] * count, pa.string()),
        pa.array(metadata, pa.map_(pa.string(), pa.string())),
        pa.array([key.encode()] * count, pa.binary()),
        pa.array(payloads, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)


class RedisDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_redis"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return RedisStreamReader(dict(self.options))


class GroupLag:
    """The consumer group's ``lag`` (``XINFO GROUPS``, Redis 7): the stream's entries not yet delivered
    to the group. The driver takes exactly each batch's entries for the group, so that is what lies
    behind the batch. On a client of the engine's own, kept for the run."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.server = config.stream
        self._client: Any = None

    def lag(self, end: Any) -> SourceLag | None:
        try:
            with classified(self.server, "redis source: cannot read the group's lag", Code.SOURCE_FAILED):
                if self._client is None:
                    self._client = connect(self.server, Code.SOURCE_FAILED)
                groups = self._client.xinfo_groups(self.server.key)
        except BaseException:
            self.close()  # a fresh connection next time
            raise
        for info in groups:
            if _text(info.get("name")) == self.config.group:
                behind = info.get("lag")
                # None: the server cannot tell (entries deleted in the group's range); older than
                # Redis 7 the field is missing altogether.
                return SourceLag(float(behind), "entries") if behind is not None else None
        return None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()


def lag_reader(settings: RedisSourceSettings, ctx: SourceContext) -> GroupLag:
    return GroupLag(Config.of(settings, ctx))


def read_stream(spark: SparkSession, settings: RedisSourceSettings, ctx: SourceContext) -> DataFrame:
    return read_python_source(spark, RedisDataSource, Config.of(settings, ctx), ctx, SCHEMA)


__all__ = ["RedisDataSource", "read_stream"]
