"""``builtin:s3`` destination: each micro-batch one object, published exactly once.

The batch's records are serialized on the executors (``sdk.record.format``, default ``opencdc/json``;
one line each, in source order) and gathered on the driver while Spark computes them (``stage``; a
micro-batch is bounded by ``maxRecordsPerBatch``). ``publish`` then writes

1. the data object ``PREFIX/GENERATION-BATCH-WRITER.json`` (names sort in delivery order; a replay of
   the same batch has the same name, so it overwrites rather than adds), then
2. the writer's marker object ``PREFIX/.conduit-delivery-WRITER.json`` holding the delivery hash.

A crash before step 2 leaves the marker on the previous batch: the replay writes the same object again
and then the marker. A replay that finds its hash in the marker (:func:`delivered`) writes nothing.
So each batch's records are in the bucket once. Conduit names objects by the time of the write
(``UNIXNANO.json``): a name a replay cannot reproduce. An empty batch writes only the marker.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.connectors.record_format import record_lines
from airflow_conduit.engine.connectors.s3._client import MISSING_OBJECT, S3Access, classified, error_code
from airflow_conduit.engine.connectors.s3.source import MARKER_NAME
from airflow_conduit.errors import Code
from airflow_conduit.record import ORDER_COLUMNS
from airflow_conduit.state import path_segment

if TYPE_CHECKING:
    from airflow_conduit.config.settings.s3 import S3DestinationSettings

logger = logging.getLogger("airflow_conduit.engine")

CONTENT_TYPE = "application/json"
EXTENSION = "json"


def _writer(delivery: Delivery) -> str:
    return path_segment(f"{delivery.pipeline_id}-{delivery.destination_id}")


def _key(prefix: str, name: str) -> str:
    return posixpath.join(prefix, name) if prefix else name


def marker_key(prefix: str, delivery: Delivery) -> str:
    return _key(prefix, f"{MARKER_NAME}{_writer(delivery)}.json")


def object_key(prefix: str, delivery: Delivery) -> str:
    return _key(prefix, f"{delivery.generation}-{delivery.batch_id:012d}-{_writer(delivery)}.{EXTENSION}")


def _context(access: S3Access, delivery: Delivery) -> str:
    return f"s3 destination {delivery.destination_id} ({access.where})"


@dataclass
class StagedObject:
    """A batch's object, held on the driver until :meth:`publish` writes it and then the marker."""

    access: S3Access
    prefix: str
    delivery: Delivery
    body: bytes
    records: int
    nacks: list[tuple[int, str]] = field(default_factory=list)

    def publish(self) -> int:
        context = _context(self.access, self.delivery)
        client = self.access.client()
        with classified(self.access, context, Code.DESTINATION_FAILED):
            if self.records:
                client.put_object(
                    Bucket=self.access.bucket,
                    Key=object_key(self.prefix, self.delivery),
                    Body=self.body,
                    ContentType=CONTENT_TYPE,
                )
            marker = {
                "hash": self.delivery.hash,
                "batch": self.delivery.batch_id,
                "generation": self.delivery.generation,
                "object": object_key(self.prefix, self.delivery) if self.records else None,
            }
            client.put_object(
                Bucket=self.access.bucket,
                Key=marker_key(self.prefix, self.delivery),
                Body=json.dumps(marker).encode(),
                ContentType=CONTENT_TYPE,
            )
        return self.records

    def discard(self) -> None:
        self.body = b""


def stage(records: DataFrame, settings: S3DestinationSettings, delivery: Delivery) -> StagedObject:
    """Compute the batch's lines and hold them as one object body (see the module doc)."""
    access = S3Access.from_settings(settings)
    started = time.perf_counter()
    lines = record_lines(records.drop(*ORDER_COLUMNS), settings.output_format)
    values = lines.toArrow().column("value").to_pylist()
    body = "".join(f"{value}\n" for value in values).encode()
    logger.info(
        "%s: batch %d computed in %.2f s (%d records, %d bytes)",
        _context(access, delivery),
        delivery.batch_id,
        time.perf_counter() - started,
        len(values),
        len(body),
    )
    return StagedObject(access, settings.prefix, delivery, body, len(values))


def delivered(settings: S3DestinationSettings, delivery: Delivery) -> bool:
    """Whether the bucket already holds this delivery: the writer's marker names the same hash."""
    from botocore.exceptions import ClientError  # type: ignore[import-untyped]

    if not delivery.hash:
        return False
    access = S3Access.from_settings(settings)
    with classified(access, _context(access, delivery), Code.DESTINATION_FAILED):
        try:
            got = access.client().get_object(Bucket=access.bucket, Key=marker_key(settings.prefix, delivery))
        except ClientError as error:
            if error_code(error) in MISSING_OBJECT:
                return False
            raise
        held: Any = json.loads(got["Body"].read())
    return isinstance(held, dict) and held.get("hash") == delivery.hash
