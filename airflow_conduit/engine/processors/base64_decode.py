"""``base64.decode``: the field's base64 text (or bytes) decoded, stored as text; invalid base64 or a
value that is not text nacks the record; a missing field is left alone."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors import _record_fields as fields
from airflow_conduit.engine.processors.custom_python import apply_builtin
from airflow_conduit.gotemplate.values import go_type


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def make(settings: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ref = parse_field_ref(settings["field"])

    def process(record: dict[str, Any]) -> dict[str, Any]:
        value = fields.get(record, ref)
        if value is None:
            return record
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, bytes | bytearray):
            raise fields.RecordError(f"unexpected data type {go_type(value)}")
        try:
            decoded = base64.b64decode(bytes(value), validate=True)
        except (binascii.Error, ValueError) as error:
            raise fields.RecordError(f"failed to decode the value: {error}") from None
        if ref.is_data and not ref.path:
            fields.set_value(record, ref, decoded)  # a whole data field: raw data, byte for byte
        else:
            # A string field: Go keeps the bytes, its JSON turns invalid UTF-8 into U+FFFD, as here.
            fields.set_value(record, ref, decoded.decode("utf-8", errors="replace"))
        return record

    return process
