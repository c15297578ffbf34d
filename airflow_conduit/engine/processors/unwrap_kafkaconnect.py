"""``unwrap.kafkaconnect``: a Kafka Connect record's ``payload`` becomes the record's ``.Payload.After``
(operation ``create``), its key's ``payload`` the key; the position and metadata are kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors import _record_fields as fields
from airflow_conduit.engine.processors import _unwrap
from airflow_conduit.engine.processors.custom_python import apply_builtin


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def make(settings: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ref = parse_field_ref(settings.get("field") or ".Payload.After")

    def process(record: dict[str, Any]) -> dict[str, Any]:
        wrapped = _unwrap.event(fields.get(record, ref), only_structured_hint=True)
        payload = wrapped.get("payload")
        if not isinstance(payload, dict):
            raise fields.RecordError("referenced record field doesn't contain a payload field")
        return {
            "position": record["position"],
            "operation": "create",
            "metadata": record.get("metadata") or {},
            "key": _unwrap.key(record.get("key")),
            "payload": {"before": None, "after": payload},
        }

    return process
