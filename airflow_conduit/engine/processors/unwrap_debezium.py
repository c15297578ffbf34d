"""``unwrap.debezium``: the Debezium event in a field replaces the record except its position: ``op``
becomes the operation, ``before``/``after`` the payload (a string as raw data), the key's ``payload`` the
key; the event's fields are merged into the metadata (``source`` flattened, others as ``debezium.*``,
``ts_ms`` as ``opencdc.readAt``), the event winning over the record's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors import _record_fields as fields
from airflow_conduit.engine.processors import _unwrap
from airflow_conduit.engine.processors.custom_python import apply_builtin
from airflow_conduit.gotemplate.values import go_type, to_text

OPERATIONS = {"c": "create", "u": "update", "d": "delete", "r": "snapshot", "$unset": "update"}
RecordError = fields.RecordError


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def _data(name: str, value: Any) -> Any:
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        return value.encode()
    raise RecordError(f"failed to parse field {name}: expected a map or a string, got {go_type(value)}")


def _flatten(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for name, item in value.items():
            out.update(_flatten(f"{prefix}.{name}" if prefix else str(name), item))
        return out
    if value is None:
        return {}
    return {prefix: value if isinstance(value, str) else to_text(value)}


def _metadata(record: dict[str, Any], event: dict[str, Any]) -> dict[str, str]:
    metadata = dict(record.get("metadata") or {})
    source: dict[str, str] = {}
    for name, value in event.items():
        if name in ("after", "before", "op"):
            continue
        if name == "ts_ms":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RecordError("error unwrapping metadata: ts_ms is not a float")
            metadata["opencdc.readAt"] = str(int(value) * 1_000_000)
        elif name == "source":
            source = _flatten("", value)
        else:
            metadata.update(_flatten(f"debezium.{name}", value))
    metadata.update(source)  # the source's fields win, as in Conduit
    return metadata


def make(settings: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ref = parse_field_ref(settings.get("field") or ".Payload.After")

    def process(record: dict[str, Any]) -> dict[str, Any]:
        wrapped = _unwrap.event(fields.get(record, ref))
        event = wrapped.get("payload")
        if not isinstance(event, dict):
            raise RecordError("data to be unwrapped doesn't contain a payload field")
        missing = [
            f'the "{name}" field is missing from debezium payload'
            for name in ("after", "source", "op")
            if name not in event
        ]
        if missing:
            raise RecordError("invalid record: " + "\n".join(missing))
        before, after = _data("before", event.get("before")), _data("after", event.get("after"))
        op = event.get("op")
        if not isinstance(op, str):
            raise RecordError(f"{to_text(op)} operation is not a string")
        if op not in OPERATIONS:
            raise RecordError(f'error unwrapping operation: "{op}" is an invalid operation')
        return {
            "position": record["position"],
            "operation": OPERATIONS[op],
            "metadata": _metadata(record, event),
            "key": _unwrap.key(record.get("key")),
            "payload": {"before": before, "after": after},
        }

    return process
