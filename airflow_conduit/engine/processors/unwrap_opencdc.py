"""``unwrap.opencdc``: the record becomes the OpenCDC record stored in one of its fields (structured, or
JSON text/raw data), keeping its own position, as Conduit's processor does: the stored record's
operation, metadata, key and payload replace the record's; data given as a string is base64 raw data.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors import _record_fields as fields
from airflow_conduit.engine.processors.custom_python import apply_builtin
from airflow_conduit.gotemplate.values import Operation, go_type, to_text
from airflow_conduit.record import OPERATIONS

RecordError = fields.RecordError


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def _stored(value: Any) -> dict[str, Any]:
    if isinstance(value, bytes | bytearray | str):
        try:
            stored = json.loads(value)
        except (ValueError, UnicodeDecodeError) as error:
            raise RecordError(f"failed to unmarshal raw data as JSON: {error}") from None
        if not isinstance(stored, dict):
            raise RecordError(f"failed to unmarshal raw data as JSON: not an object but {go_type(stored)}")
        return stored
    if isinstance(value, dict):
        return value
    if value is None:
        raise RecordError("field to unmarshal is nil")
    raise RecordError(f"unexpected data type {go_type(value)}")


def _operation(stored: dict[str, Any]) -> str:
    if "operation" not in stored:
        raise RecordError("failed unmarshalling record: failed unmarshalling operation: no operation")
    value = stored["operation"]
    if not isinstance(value, str):
        raise RecordError(
            "failed unmarshalling record: failed unmarshalling operation: "
            f"expected a opencdc.Operation or a string, got {go_type(value)}"
        )
    if value in OPERATIONS:
        return value
    number = value.removeprefix("Operation(").removesuffix(")")
    if number.isdigit() and str(Operation(int(number))) in OPERATIONS:
        return str(Operation(int(number)))
    raise RecordError(
        f'failed unmarshalling record: failed unmarshalling operation: invalid operation "{value}"'
    )


def _metadata(stored: dict[str, Any]) -> dict[str, str]:
    if "metadata" not in stored:
        raise RecordError("failed unmarshalling record: failed unmarshalling metadata: no metadata")
    value = stored["metadata"]
    if not isinstance(value, dict):
        raise RecordError(
            "failed unmarshalling record: failed unmarshalling metadata: "
            f"expected a opencdc.Metadata or a map[string]interface{{}}, got {go_type(value)}"
        )
    return {str(k): v if isinstance(v, str) else to_text(v) for k, v in value.items()}


def _data(holder: dict[str, Any], name: str, what: str) -> Any:
    value = holder.get(name)
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as error:
            raise RecordError(
                f"failed unmarshalling record: {what}: couldn't decode payload {error}: {name}"
            ) from None
    raise RecordError(
        f"failed unmarshalling record: {what}: expected a map[string]interface{{}} or string, got: {go_type(value)}"
    )


def make(settings: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ref = parse_field_ref(settings.get("field") or ".Payload.After")

    def process(record: dict[str, Any]) -> dict[str, Any]:
        stored = _stored(fields.get(record, ref))
        operation, metadata = _operation(stored), _metadata(stored)
        key = _data(stored, "key", "failed unmarshalling key")
        if "payload" not in stored:
            raise RecordError("failed unmarshalling record: failed unmarshalling payload: no payload")
        payload = stored["payload"]
        if not isinstance(payload, dict):
            raise RecordError(
                "failed unmarshalling record: failed unmarshalling payload: "
                f"expected a opencdc.Change or a map[string]interface{{}}, got {go_type(payload)}"
            )
        return {
            "position": record["position"],  # the record keeps its own position
            "operation": operation,
            "metadata": metadata,
            "key": key,
            "payload": {
                "before": _data(payload, "before", "failed unmarshalling payload"),
                "after": _data(payload, "after", "failed unmarshalling payload"),
            },
        }

    return process
