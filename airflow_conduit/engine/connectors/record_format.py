"""Each record as one line of text in a destination's ``sdk.record.format`` (the connector SDK's
``record_serializer.go``): what the file destination writes and the log destination prints.

``opencdc/json`` stays in the JVM (:func:`airflow_conduit.record.opencdc_json_sql`), and so does a
``template`` that Spark SQL can print (:func:`airflow_conduit.config.template_sql.text_sql`: literal text,
``toJson`` of the key or payload, ``index .Metadata``), such as the payload-only
``{{ toJson .Payload.After }}``. ``debezium/json`` and the other templates run per record in Python on
the executors, through Arrow (``mapInArrow`` keeps each partition's rows in order, so the destination's
ordering and exactly-once are unchanged: only each line's text differs).

- ``debezium/json``: the SDK's ``DebeziumConverter`` and ``JSONEncoder``: ``{"schema": ..., "payload":
  {"before", "after", "source", "op", "ts_ms", "transaction"}}``. ``source`` is the metadata, ``ts_ms`` the
  ``opencdc.readAt`` time in milliseconds (left out when there is none), the key and position are not
  written. Raw data is parsed as a JSON object (its numbers become float64, as in Go) or else hoisted
  into ``{"opencdc.rawData": base64}`` (the key is an option). The Kafka Connect schema is reflected from
  the values as the SDK's ``kafkaconnect.Reflect`` does; Go lists a map's fields in its random map
  order, here they are sorted.
- ``template``: the Go template executed on the record with ``missingkey=error``; when it cannot be
  executed for a record, the record is written as ``opencdc/json`` instead, as Conduit's
  ``Record.Bytes`` falls back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame

from airflow_conduit.engine.arrow_arrays import string_array
from airflow_conduit.gotemplate import Template, TemplateExecError
from airflow_conduit.gotemplate.gojson import Fields, go_json
from airflow_conduit.gotemplate.opencdc import from_record_dict
from airflow_conduit.record import opencdc_json_sql, record_text_sql

if TYPE_CHECKING:  # the file source's workers import this module: it stays light (no pydantic)
    from airflow_conduit.config.settings.record_format import RecordFormat

DEBEZIUM_OPS = {"create": "c", "update": "u", "delete": "d", "snapshot": "r"}
READ_AT = "opencdc.readAt"
RAW_DATA_KEY = "opencdc.rawData"  # the SDK's default for debezium.rawData.key
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = 1 << 63


def record_lines(records: DataFrame, record_format: RecordFormat | None = None) -> DataFrame:
    """One ``value`` string per record, in the records' partitions and order."""
    from airflow_conduit.engine.frames import select_sql  # the driver's: workers import this module

    if record_format is None or record_format.is_default:
        return select_sql(records, [f"{opencdc_json_sql()} AS value"])
    if record_format.name == "template":
        # The driver's: the workers import this module, and the config layer is heavy for them.
        from airflow_conduit.config.template_sql import source_text_sql

        if (sql := source_text_sql(record_format.template, missing_key_error=True)) is not None:
            return records.selectExpr(f"{sql} AS value")
    return records.selectExpr(*record_text_sql()).mapInArrow(_mapper(record_format), "value string")


def _mapper(record_format: RecordFormat) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from airflow_conduit.engine.processors.custom_python import ArrowRecords

        serialize = serializer(record_format)  # a template is parsed once per task
        for arrow_batch in batches:
            batch = ArrowRecords(arrow_batch)
            lines = [serialize(batch.record(i)) for i in range(arrow_batch.num_rows)]
            yield pa.RecordBatch.from_arrays([string_array(lines)], names=["value"])

    return run


def serializer(record_format: RecordFormat) -> Callable[[Mapping[str, Any]], str]:
    """The format's function from a record dict (``custom.python``'s) to its text."""
    if record_format.name == "template":
        template = Template.parse(record_format.template)

        def render(record: Mapping[str, Any]) -> str:
            go_record = from_record_dict(record)
            try:
                return template.execute(go_record, missing_key_error=True)
            except TemplateExecError:
                return go_json(go_record)  # Conduit's Record.Bytes: the default format when it fails

        return render
    if record_format.name == "debezium/json":
        name, key = record_format.schema_name, record_format.raw_data_key
        return lambda record: go_json(debezium_envelope(record, schema_name=name, raw_data_key=key))
    return lambda record: go_json(from_record_dict(record))


# debezium/json ------------------------------------------------------------------------------------


def debezium_envelope(
    record: Mapping[str, Any], *, schema_name: str = "", raw_data_key: str = RAW_DATA_KEY
) -> Fields:
    """The SDK's Debezium envelope of a record dict, as ``go_json`` writes it."""
    payload = record.get("payload") or {}
    before = structured(payload.get("before"), raw_data_key)
    after = structured(payload.get("after"), raw_data_key)
    metadata = record.get("metadata")
    body = Fields(
        before=before, after=after, source=metadata, op=DEBEZIUM_OPS.get(str(record.get("operation")), "")
    )
    read_at = read_at_millis(metadata)
    if read_at:
        body["ts_ms"] = read_at  # omitempty
    body["transaction"] = None
    schema = _schema("struct", name=schema_name)
    schema["fields"] = [
        _with_field(reflect(before if before is not None else after) or _schema("struct"), "before", True),
        _with_field(reflect(after if after is not None else before) or _schema("struct"), "after", True),
        _with_field(reflect(metadata) or _schema("struct", optional=True), "source"),
        _schema("string", field="op"),
        _schema("int64", optional=True, field="ts_ms"),
        _schema(
            "struct",
            optional=True,
            fields=[
                _schema("string", field="id"),
                _schema("int64", field="total_order"),
                _schema("int64", field="data_collection_order"),
            ],
            field="transaction",
        ),
    ]
    return Fields(schema=schema, payload=body)


def structured(data: Any, raw_data_key: str = RAW_DATA_KEY) -> dict[str, Any] | None:
    """Structured data as it is; raw data parsed as a JSON object, else ``{raw_data_key: bytes}``."""
    if not isinstance(data, bytes | bytearray):
        return data
    if not data:
        return None
    try:
        parsed = json.loads(
            bytes(data).decode("utf-8", errors="replace"),
            parse_int=float,
            parse_float=_float64,
            parse_constant=_not_json,
        )
    except (ValueError, OverflowError):
        return {raw_data_key: bytes(data)}
    if parsed is None or isinstance(parsed, dict):  # JSON null leaves Go's map nil
        return parsed
    return {raw_data_key: bytes(data)}  # Go cannot unmarshal an array, string or number into a map


def _not_json(text: str) -> float:
    raise ValueError(f"invalid character in JSON: {text}")  # NaN and Infinity are not JSON to Go


def _float64(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} out of range for float64")
    return value


def read_at_millis(metadata: Mapping[str, str] | None) -> int:
    """``opencdc.readAt`` (Unix nanoseconds) in milliseconds; 0 when absent or not an int64."""
    text = (metadata or {}).get(READ_AT, "")
    if not _INT.fullmatch(text):
        return 0
    nanos = int(text)
    return nanos // 1_000_000 if -_INT64 <= nanos < _INT64 else 0


def reflect(value: Any) -> Fields | None:
    """The Kafka Connect schema of a Go value (``kafkaconnect.Reflect``); ``None`` for nil."""
    if value is None:
        return None
    if isinstance(value, bool):
        return _schema("boolean")
    if isinstance(value, int):
        return _schema("int64")
    if isinstance(value, float):
        return _schema("double")
    if isinstance(value, str):
        return _schema("string")
    if isinstance(value, bytes | bytearray):
        return _schema("bytes", optional=True)
    if isinstance(value, Mapping):  # a map with string keys is a struct
        fields = [
            _with_field(reflect(item) or _schema("string", optional=True), str(key))
            for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))
        ]
        return _schema("struct", optional=True, fields=fields)
    if isinstance(value, list | tuple):
        items = reflect(value[0]) if value else None
        return _schema("array", optional=True, items=items or _schema("string", optional=True))
    return _schema("string")


def _schema(
    kind: str,
    *,
    optional: bool = False,
    name: str = "",
    items: Fields | None = None,
    fields: list[Fields] | None = None,
    field: str = "",
) -> Fields:
    """A ``kafkaconnect.Schema`` as JSON: its fields in the struct's order, empty ones left out."""
    schema = Fields(type=kind)
    if optional:
        schema["optional"] = True
    if name:
        schema["name"] = name
    if items is not None:
        schema["items"] = items
    if fields:
        schema["fields"] = fields
    if field:
        schema["field"] = field
    return schema


def _with_field(schema: Fields, field: str, optional: bool = False) -> Fields:
    """``schema`` as a struct field (``field`` goes last, as in the Go struct)."""
    return _schema(
        schema["type"],
        optional=optional or bool(schema.get("optional")),
        name=schema.get("name", ""),
        items=schema.get("items"),
        fields=schema.get("fields"),
        field=field,
    )
