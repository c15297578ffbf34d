"""``base64.encode``: the field's value as base64 text (bytes as they are, strings as UTF-8, numbers and
bools as Go prints them); a missing field is left alone, a map or list nacks the record."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors import _record_fields as fields
from airflow_conduit.engine.processors.custom_python import apply_builtin
from airflow_conduit.gotemplate.values import go_type, to_text


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def as_bytes(value: Any) -> bytes:
    """What Conduit encodes: bytes, a string's UTF-8, a number's or bool's ``%v`` text."""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool | int | float):
        return to_text(value).encode()
    raise fields.RecordError(f"unexpected data type {go_type(value)}")


def make(settings: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ref = parse_field_ref(settings["field"])

    def process(record: dict[str, Any]) -> dict[str, Any]:
        value = fields.get(record, ref)
        if value is None:
            return record
        fields.set_value(record, ref, base64.b64encode(as_bytes(value)).decode())
        return record

    return process
