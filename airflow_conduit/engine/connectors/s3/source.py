"""``builtin:s3`` source: one record per object under ``aws.bucket``/``prefix``, a snapshot first, then
the bucket's changes, polled every ``pollingPeriod`` (Conduit's S3 source).

Records, as Conduit's connector makes them: raw ``.Key`` (the object key), raw ``.Payload.After`` (the
object's bytes), metadata ``s3.contentType``; operation ``snapshot`` for the objects there when the
pipeline first ran, then ``create`` for a new key, ``update`` for a new version of a key, ``delete`` for
a delete marker (deletes and updates are seen in a versioned bucket only, as in Conduit). Position:
``KEY_sSECONDS_VERSION`` (snapshot) or ``KEY_cSECONDS_VERSION`` (change): Conduit's ``KEY_sSECONDS``
with the object's version id (its ETag in a bucket without versioning) added, so it is unique.

Offsets (Spark's offset log): ``{"t0": ms, "cursor": [phase, ms, key, n]}``. Every listing sees the
bucket's version history: each key's versions and delete markers, oldest first (``n`` counts them).
The snapshot is, per key, the newest entry modified at or before ``t0``, when it is a version (phase 0,
key order); the changes are every entry modified after ``t0`` (phase 1, in modification time, key,
``n`` order). A batch is the entries after its start cursor up to its end cursor, so in a versioned
bucket a replay (same offsets) reads exactly the same versions (``GetObject`` by version id). In a
bucket without versioning an object overwritten since leaves its old range and comes again, newer, in
a later batch: nothing is lost, but the replay differs (the spec says ``replays_identically=False``).

S3 lists modification times to the second: an entry is admitted only once the server's clock
(``Date`` of the listing) is :data:`SETTLE_MS` past it, so an object written in the same second as a
listing cannot land behind the cursor. Nothing is consumed, so ``commit`` has nothing to release.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from airflow_conduit.engine.connectors._stream import (
    SourceContext,
    parse_options,
    source_options,
    stop_requested,
)
from airflow_conduit.engine.connectors.s3._client import (
    MISSING_OBJECT,
    S3Access,
    classified,
    error_code,
)
from airflow_conduit.errors import Code
from airflow_conduit.record import source_schema

if TYPE_CHECKING:  # the module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings.s3 import S3SourceSettings

logger = logging.getLogger("airflow_conduit.engine")

META_CONTENT_TYPE = "s3.contentType"
"""Conduit's S3 source metadata: the object's content type."""
MARKER_NAME = ".conduit-delivery-"
"""The S3 destination's delivery markers (:mod:`.destination`): bookkeeping, never read as records."""
SETTLE_MS = 2000
SECRET_OPTION = "conduit.secret"
"""The credentials travel in an option of their own: Spark redacts options whose name says secret
wherever it prints a plan."""
ARROW_ROWS = 1000
GET_THREADS = 8
"""Object reads in flight at once per partition."""

SCHEMA = source_schema("position", "operation", "metadata", "key_raw", "after_raw")
_ARROW_SCHEMA = pa.schema(
    [
        ("position", pa.binary()),
        ("operation", pa.string()),
        ("metadata", pa.map_(pa.string(), pa.string())),
        ("key_raw", pa.binary()),
        ("after_raw", pa.binary()),
    ]
)

Cursor = tuple[int, int, str, int]
"""(phase: 0 snapshot / 1 change, modified ms (0 in the snapshot), key, n)."""


@dataclass(frozen=True)
class Entry:
    """One version or delete marker of one key."""

    key: str
    version_id: str
    etag: str
    modified_ms: int
    n: int
    """Its place in its key's history, oldest first."""
    deleted: bool
    """A delete marker."""
    after_version: bool
    """The entry before it in its key's history is a version (a new version is then an update)."""


@dataclass(frozen=True)
class Listing:
    entries: tuple[Entry, ...]
    now_ms: int
    """The server's clock when it answered (its ``Date``)."""


@dataclass(frozen=True)
class Pick:
    """An entry chosen for a batch, with the record it becomes."""

    entry: Entry
    operation: str
    cursor: Cursor


@dataclass(frozen=True)
class S3SourceConfig:
    """What the stream reader needs of the settings, but the credentials (see :data:`SECRET_OPTION`)."""

    bucket: str
    prefix: str
    region: str
    endpoint: str
    path_style: bool
    polling_period: float
    max_records: int

    @classmethod
    def from_settings(cls, settings: S3SourceSettings) -> S3SourceConfig:
        return cls(
            bucket=settings.bucket,
            prefix=settings.prefix,
            region=settings.region,
            endpoint=settings.endpoint,
            path_style=settings.path_style,
            polling_period=settings.polling_period,
            max_records=settings.max_records_per_batch,
        )


def _millis(value: Any) -> int:
    return int(value.timestamp() * 1000)


def list_history(client: Any, bucket: str, prefix: str) -> Listing:
    """Every version and delete marker under ``prefix``, by key, oldest first."""
    by_key: dict[str, list[tuple[int, int, bool, str, str]]] = {}
    now_ms = 0
    rank = 0
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        if not now_ms:
            date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
            now_ms = _millis(parsedate_to_datetime(date)) if date else int(time.time() * 1000)
        # S3 lists a key's versions newest first; rank keeps that order among equal times.
        for item in page.get("Versions", []):
            rank += 1
            entry = (_millis(item["LastModified"]), -rank, False, item["VersionId"], item["ETag"].strip('"'))
            by_key.setdefault(item["Key"], []).append(entry)
        for item in page.get("DeleteMarkers", []):
            rank += 1
            marker = (_millis(item["LastModified"]), -rank, True, item["VersionId"], "")
            by_key.setdefault(item["Key"], []).append(marker)
    entries = []
    for key, history in by_key.items():
        if key.rsplit("/", 1)[-1].startswith(MARKER_NAME):
            continue
        history.sort()
        previous_is_version = False
        for n, (modified, _, deleted, version, etag) in enumerate(history):
            entries.append(Entry(key, version, etag, modified, n, deleted, previous_is_version))
            previous_is_version = not deleted
    return Listing(tuple(entries), now_ms or int(time.time() * 1000))


def picks(listing: Listing, t0: int, after: Cursor | None, upto: Cursor | None, horizon: int) -> list[Pick]:
    """The records after cursor ``after`` up to ``upto`` (inclusive), changes modified by ``horizon``,
    in source order."""
    chosen: list[Pick] = []
    snapshot: dict[str, Entry] = {}
    for entry in listing.entries:
        if entry.modified_ms <= t0:
            held = snapshot.get(entry.key)
            if held is None or entry.n > held.n:
                snapshot[entry.key] = entry
        elif entry.modified_ms <= horizon:
            operation = "delete" if entry.deleted else ("update" if entry.after_version else "create")
            chosen.append(Pick(entry, operation, (1, entry.modified_ms, entry.key, entry.n)))
    for key, entry in snapshot.items():
        if not entry.deleted:
            chosen.append(Pick(entry, "snapshot", (0, 0, key, entry.n)))
    chosen.sort(key=lambda pick: pick.cursor)
    return [
        pick
        for pick in chosen
        if (after is None or pick.cursor > after) and (upto is None or pick.cursor <= upto)
    ]


def _cursor(value: Any) -> Cursor | None:
    return None if value is None else (int(value[0]), int(value[1]), str(value[2]), int(value[3]))


@dataclass(frozen=True)
class _Objects(InputPartition):
    picks: tuple[tuple[str, str, str, int, str, str], ...]
    """(key, version id, etag, modified ms, operation, position) per record, in source order."""


def position_of(pick: Pick) -> str:
    entry = pick.entry
    mark = "s" if pick.cursor[0] == 0 else "c"
    version = entry.version_id if entry.version_id != "null" else entry.etag
    return f"{entry.key}_{mark}{entry.modified_ms // 1000}_{version}"


class S3StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        parsed = parse_options(options, S3SourceConfig)
        self.stop_file, self.parallelism = parsed.stop_file, parsed.parallelism
        self.config = parsed.config
        secret = json.loads(options[SECRET_OPTION])
        self.access = S3Access(
            secret["id"],
            secret["key"],
            self.config.region,
            self.config.bucket,
            self.config.endpoint,
            self.config.path_style,
        )
        self._client: Any = None
        self._target: int | None = None  # the server's clock when an AvailableNow run began
        self._idle_since = 0.0  # when a listing last found nothing new
        self._listing: Listing | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to the Python workers that run read(): a boto3 client does not pickle, nor need the
        # workers the driver's listing.
        return {**self.__dict__, "_client": None, "_listing": None}

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.access.client()
        return self._client

    def _list(self) -> Listing:
        with classified(self.access, f"s3 source: cannot list {self.access.where}", Code.SOURCE_FAILED):
            self._listing = list_history(self.client, self.config.bucket, self.config.prefix)
        return self._listing

    def _listing_now(self) -> int:
        """The server's clock, from a one-key listing (cheap, unlike the whole history)."""
        with classified(self.access, f"s3 source: cannot list {self.access.where}", Code.SOURCE_FAILED):
            page = self.client.list_objects_v2(
                Bucket=self.config.bucket, Prefix=self.config.prefix, MaxKeys=1
            )
        date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        return _millis(parsedate_to_datetime(date)) if date else int(time.time() * 1000)

    def initialOffset(self) -> dict:
        # t0 is fixed by the first batch that reads anything (its end offset holds it), so a batch 0
        # replayed after a crash uses the t0 it was planned with.
        return {"t0": None, "cursor": None}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        # Read what the bucket holds now: wait until everything written by now is settled.
        target = self._list().now_ms
        while (behind := target + SETTLE_MS - self._listing_now()) > 0:
            time.sleep(behind / 1000 + 0.05)
        self._target = target

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if stop_requested(self.stop_file):
            return start
        if self._target is None and time.monotonic() - self._idle_since < self.config.polling_period:
            return start
        listing = self._list()
        horizon = listing.now_ms - SETTLE_MS
        if self._target is not None:
            horizon = min(horizon, self._target)
        t0 = start["t0"] if start["t0"] is not None else horizon
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else sys.maxsize
        found = picks(listing, t0, _cursor(start["cursor"]), None, horizon)[:budget]
        if not found:
            self._idle_since = time.monotonic()
            # A first listing with no snapshot still fixes t0 (one empty batch): what comes later is
            # a change (create), as after Conduit's snapshot of an empty bucket.
            return start if start["t0"] is not None else {"t0": t0, "cursor": None}
        return {"t0": t0, "cursor": list(found[-1].cursor)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end["cursor"] is None:
            return []
        upto = _cursor(end["cursor"])
        listing = self._listing
        if listing is None or not any(
            (0, 0, e.key, e.n) == upto or (1, e.modified_ms, e.key, e.n) == upto for e in listing.entries
        ):
            listing = self._list()  # a fresh reader (a replay after a restart), or the end is newer
        found = picks(listing, int(end["t0"]), _cursor(start["cursor"]), upto, sys.maxsize)
        rows = tuple(
            (p.entry.key, p.entry.version_id, p.entry.etag, p.entry.modified_ms, p.operation, position_of(p))
            for p in found
        )
        pieces = max(1, min(self.parallelism, len(rows)))
        size = -(-len(rows) // pieces)
        return [_Objects(rows[i : i + size]) for i in range(0, len(rows), size)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Objects)
        client = self.client  # boto3 clients are thread-safe

        def fetch(pick: tuple[str, str, str, int, str, str]) -> tuple[bytes, str] | None:
            key, version, _etag, _modified, operation, _position = pick
            return None if operation == "delete" else self._get(client, key, version)

        rows: list[tuple[bytes, str, list[tuple[str, str]] | None, bytes, bytes | None]] = []
        # GETs are latency-bound: a few in flight at once; map keeps source order.
        with ThreadPoolExecutor(max_workers=GET_THREADS) as pool:
            for pick, fetched in zip(partition.picks, pool.map(fetch, partition.picks), strict=True):
                key, _version, _etag, _modified, operation, position = pick
                if operation == "delete":
                    rows.append((position.encode(), operation, None, key.encode(), None))
                elif fetched is not None:
                    body, content_type = fetched
                    metadata = [(META_CONTENT_TYPE, content_type)]
                    rows.append((position.encode(), operation, metadata, key.encode(), body))
                if len(rows) >= ARROW_ROWS:
                    yield _batch(rows)
                    rows = []
        if rows:
            yield _batch(rows)

    def _get(self, client: Any, key: str, version: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError  # type: ignore[import-untyped]

        extra = {"VersionId": version} if version != "null" else {}
        context = f"s3 source: cannot read {key!r} of {self.access.where}"
        with classified(self.access, context, Code.SOURCE_FAILED):
            try:
                got = client.get_object(Bucket=self.config.bucket, Key=key, **extra)
            except ClientError as error:
                if error_code(error) in MISSING_OBJECT:
                    # Removed for good since it was listed (a version deleted, or an object in a
                    # bucket without versioning): there is nothing left to read.
                    logger.warning(
                        "s3 source: %s (version %s) is gone since it was listed; skipped", key, version
                    )
                    return None
                raise
            return bytes(got["Body"].read()), str(got.get("ContentType") or "")

    def commit(self, end: dict) -> None:
        """Objects are not consumed: the offsets in Spark's log are the whole position."""


def _batch(
    rows: list[tuple[bytes, str, list[tuple[str, str]] | None, bytes, bytes | None]],
) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(columns, _ARROW_SCHEMA, strict=True)],
        schema=_ARROW_SCHEMA,
    )


class S3DataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "conduit_s3"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return S3StreamReader(dict(self.options))


def _options(settings: S3SourceSettings, ctx: SourceContext) -> dict[str, str]:
    secret = {"id": settings.access_key_id, "key": settings.secret_access_key.get_secret_value()}
    return {**source_options(S3SourceConfig.from_settings(settings), ctx), SECRET_OPTION: json.dumps(secret)}


def read_stream(spark: SparkSession, settings: S3SourceSettings, ctx: SourceContext) -> DataFrame:
    # A missing bucket or refused credentials show at the first listing (latestOffset, on the driver),
    # classified there.
    spark.dataSource.register(S3DataSource)
    reader = spark.readStream.format(S3DataSource.name()).schema(SCHEMA)
    return reader.options(**_options(settings, ctx)).load()
