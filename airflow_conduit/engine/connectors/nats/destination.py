"""``standalone:nats`` destination: each record, in the record format (``sdk.record.format``, OpenCDC
JSON by default, as Conduit's connector writes ``record.Bytes()``), published to ``subject`` through
JetStream, in source order, each publish acknowledged by the stream.

Exactly once within the stream's duplicate window: each message carries a ``Nats-Msg-Id`` derived from
the batch's delivery hash (the same on every replay of the batch) and the record's position, so when a
batch is published again after a crash, JetStream drops the messages it already holds. A replay later
than the window (``duplicate_window``, two minutes by default) publishes them again: at least once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.connectors.nats._common import REQUEST_TIMEOUT, Connection, classify, nats_errors
from airflow_conduit.engine.connectors.record_format import record_lines
from airflow_conduit.errors import Code, ConduitError, FatalError
from airflow_conduit.record import ORDER_COLUMNS

if TYPE_CHECKING:
    from airflow_conduit.config.settings.nats import NatsDestinationSettings
    from airflow_conduit.config.settings.record_format import RecordFormat

logger = logging.getLogger(__name__)
MSG_ID = "Nats-Msg-Id"
WINDOW = 1_000
"""Publishes in flight at once (each waits for the stream's ack)."""
_CODE = Code.DESTINATION_FAILED


def message_ids(delivery_hash: str, keys: Iterator[tuple[bytes | None, list[int] | None]]) -> Iterator[str]:
    """One ``Nats-Msg-Id`` per record: the delivery hash, the record's position and its piece (``split``
    and ``clone`` make several records of one), and how often that pair came before in the batch (two
    sources may use the same positions). Position-based, not index-based: a processor that filters
    differently on a replay does not shift the other records' ids."""
    seen: dict[tuple[bytes, str], int] = {}
    for position, piece in keys:
        pair = (position or b"", ",".join(map(str, piece or ())))
        count = seen.get(pair, 0)
        seen[pair] = count + 1
        digest = hashlib.sha256(delivery_hash.encode())
        digest.update(b"\0" + pair[0] + b"\0" + pair[1].encode() + b"\0" + str(count).encode())
        yield digest.hexdigest()


@dataclass
class StagedMessages:
    """A batch ready to publish: its lines and their message ids, computed while the batch is decided."""

    records: DataFrame
    subject: str
    connection: Connection
    delivery: Delivery
    retry_attempts: int
    retry_wait: float
    record_format: RecordFormat | None = None
    duplicates: int = field(default=0)

    def _messages(self) -> Iterator[tuple[str, bytes]]:
        lines = record_lines(self.records.drop(*ORDER_COLUMNS), self.record_format).toLocalIterator()
        # The DLQ's records carry no ``_piece`` (a nacked record is one record).
        piece = "_piece" if "_piece" in self.records.columns else "CAST(NULL AS ARRAY<INT>) AS _piece"
        rows = self.records.selectExpr("position", piece).toLocalIterator()
        keys = ((row[0], row[1]) for row in rows)
        for line, msg_id in zip(lines, message_ids(self.delivery.hash, keys), strict=True):
            yield msg_id, str(line[0]).encode()

    def publish(self) -> int:
        try:
            count = asyncio.run(self._publish_all())
        finally:
            self.records.unpersist()
        if self.duplicates:
            logger.info(
                "nats destination %s: the stream dropped %d of %d messages as duplicates (a replayed batch)",
                self.delivery.destination_id,
                self.duplicates,
                count,
            )
        return count

    async def _publish_all(self) -> int:
        config = self.connection
        client = await config.connect(reconnect=False, code=_CODE)
        count = 0
        try:
            js = client.jetstream(timeout=REQUEST_TIMEOUT)
            window: list[tuple[str, bytes]] = []
            for message in self._messages():
                window.append(message)
                if len(window) >= WINDOW:
                    await self._publish_window(js, window)
                    count, window = count + len(window), []
            if window:
                await self._publish_window(js, window)
                count += len(window)
        except ConduitError:
            raise
        except nats_errors() as error:
            raise classify(
                error, config, f"nats destination: cannot publish to {self.subject!r}", _CODE
            ) from None
        finally:
            await client.close()
        return count

    async def _publish_window(self, js: Any, window: list[tuple[str, bytes]]) -> None:
        """Publish a window of messages concurrently (written in order on the one connection), retrying
        a failed window as Conduit's ``retryAttempts``/``retryWait`` do: the ids make a retry harmless."""
        import nats.errors as nerr
        import nats.js.errors as jerr

        for attempt in range(self.retry_attempts):
            sends = [js.publish(self.subject, body, headers={MSG_ID: msg_id}) for msg_id, body in window]
            results = await asyncio.gather(*sends, return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            if not failures:
                self.duplicates += sum(1 for ack in results if getattr(ack, "duplicate", False))
                return
            error = failures[0]
            if isinstance(error, (jerr.NoStreamResponseError, nerr.NoRespondersError)):
                if attempt + 1 < self.retry_attempts:
                    await asyncio.sleep(self.retry_wait)
                    continue
                # A publish gets "no responders" too when the account has no JetStream: classify() says so.
                await js.account_info()
                raise FatalError(
                    f"nats destination: no JetStream stream captures subject {self.subject!r}: create one "
                    f"(e.g. `nats stream add --subjects '{self.subject}'`) or fix the `subject` setting",
                    code=_CODE,
                )
            if isinstance(error, nerr.TimeoutError) and attempt + 1 < self.retry_attempts:
                await asyncio.sleep(self.retry_wait)
                continue
            raise error

    def discard(self) -> None:
        self.records.unpersist()


def stage(records: DataFrame, settings: NatsDestinationSettings, delivery: Delivery) -> StagedMessages:
    # One partition sorted by (_seq, _piece) is source order (no sampling job, unlike a global orderBy);
    # persisted, so the lines and the keys are read from the same rows in the same order.
    ordered = records.repartition(1).sortWithinPartitions(*ORDER_COLUMNS).persist()
    ordered.write.format("noop").mode("overwrite").save()  # computed now, while the batch is decided
    connection = Connection.from_settings(settings, delivery.destination_id)
    return StagedMessages(
        ordered,
        settings.subject,
        connection,
        delivery,
        settings.retry_attempts,
        settings.retry_wait,
        settings.output_format,
    )
