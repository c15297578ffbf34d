"""``standalone:redis`` destination (``mode: stream``): each record becomes one stream entry, exactly once.

As the Conduit connector writes it, an entry's fields are the top-level fields of the record's
``payload.after`` (a JSON object, structured or raw): string values as they are, other values as JSON
text (Conduit's Go client would print them with ``fmt``), ``null`` as an empty string. A record whose
``payload.after`` is not a non-empty JSON object cannot be written (Conduit's connector fails the write):
it is nacked, to the DLQ.

``stage`` computes the entries on the driver, in source order, and finds the records to nack; nothing
reaches Redis. ``publish`` sends, in one ``MULTI``/``EXEC``, an ``XADD key * field value ...`` per entry
and ``HSET <key>:conduit-delivery <pipeline>:<destination> <delivery hash>``: the entries and the
marker become visible together or not at all. ``delivered`` reads the marker, so a batch replayed after
that ``EXEC`` (a crash before Spark committed) is acknowledged without writing it again. The whole batch
is held in the driver's memory while it is sent (a transaction is queued as a whole).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.connectors.redis_streams._common import Server, check_stream, classified, connect
from airflow_conduit.errors import Code
from airflow_conduit.record import ORDER_COLUMNS, variant_json_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_conduit.config.settings.redis import RedisDestinationSettings

MARKER_SUFFIX = ":conduit-delivery"
Fields = dict[str, str]


def marker_key(key: str) -> str:
    """The hash beside the stream that holds each writer's last delivery hash."""
    return key + MARKER_SUFFIX


def writer(delivery: Delivery) -> str:
    return f"{delivery.pipeline_id}:{delivery.destination_id}"


def field_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def entry_fields(after_json: str | None, after_raw: bytes | None) -> Fields | str:
    """A record's stream entry, or why it cannot be one."""
    text = after_json if after_json is not None else after_raw
    if text is None:
        return "payload.after is empty: a Redis stream entry needs at least one field"
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return "payload.after is not JSON: the entry's fields are the fields of a JSON object"
    if not isinstance(value, dict):
        return f"payload.after is a JSON {type(value).__name__}, not an object: the entry's fields are an object's"
    if not value:
        return "payload.after is an empty object: a Redis stream entry needs at least one field"
    return {str(name): field_text(item) for name, item in value.items()}


@dataclass(frozen=True)
class StagedEntries:
    server: Server
    delivery: Delivery
    entries: list[Fields]
    nacks: list[tuple[int, str]] = field(default_factory=list)

    def publish(self) -> int:
        """Send the entries and the marker in one transaction; the entries written."""
        client = connect(self.server, Code.DESTINATION_FAILED)
        try:
            with classified(self.server, "redis destination: cannot write", Code.DESTINATION_FAILED):
                check_stream(client, self.server, Code.DESTINATION_FAILED)
                transaction = client.pipeline(transaction=True)
                for fields in self.entries:
                    transaction.xadd(self.server.key, fields)  # type: ignore[arg-type]
                transaction.hset(marker_key(self.server.key), writer(self.delivery), self.delivery.hash)
                transaction.execute()
        finally:
            client.close()
        return len(self.entries)

    def discard(self) -> None:
        """Nothing was sent."""


def stage(records: DataFrame, settings: RedisDestinationSettings, delivery: Delivery) -> StagedEntries:
    # One partition sorted by (_seq, _piece) is source order; toArrow hands it to the driver in bulk.
    ordered = (
        records.repartition(1)
        .sortWithinPartitions(*ORDER_COLUMNS)
        .selectExpr("_seq", f"{variant_json_sql('after')} AS after_json", "after_raw")
    )
    table = ordered.toArrow()
    entries: list[Fields] = []
    nacks: list[tuple[int, str]] = []
    columns = (table.column(name).to_pylist() for name in ("_seq", "after_json", "after_raw"))
    for seq, after_json, after_raw in zip(*columns, strict=True):
        fields = entry_fields(after_json, after_raw)
        if isinstance(fields, str):
            nacks.append((int(seq), f"standalone:redis: {fields}"))
        else:
            entries.append(fields)
    return StagedEntries(Server.of(settings), delivery, entries, nacks)


def delivered(settings: RedisDestinationSettings, delivery: Delivery) -> bool:
    """Whether the stream already holds ``delivery`` (its marker names the same hash)."""
    server = Server.of(settings)
    client: Any = connect(server, Code.DESTINATION_FAILED)
    try:
        with classified(
            server, "redis destination: cannot read the delivery marker", Code.DESTINATION_FAILED
        ):
            held = client.hget(marker_key(server.key), writer(delivery))
    finally:
        client.close()
    return bool(delivery.hash) and held is not None and held.decode() == delivery.hash
