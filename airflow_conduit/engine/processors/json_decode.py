"""``json.decode``: parse the JSON text in a field into structured data; invalid JSON nacks the record."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import JsonDecodeSettings
from airflow_conduit.engine.processors._expr import (
    apply_changes,
    get_path,
    set_path,
    sql_str,
    unsupported,
)
from airflow_conduit.record import TRY_PARSE_JSON_FUNCTION, try_parse_json_sql


def apply(records: DataFrame, proc: ProcessorConfig[JsonDecodeSettings]) -> DataFrame:
    ref = parse_field_ref(proc.settings.field)
    if ref.root not in ("key", "before", "after"):
        raise unsupported(proc, ref)
    invalid = sql_str(f"json.decode: {proc.settings.field} is not valid JSON")
    if not ref.path:
        # Raw bytes become structured; a value already structured is left as it is. The engine's
        # try_parse_json reads the bytes as they are (Spark's decodes them into a String first).
        return apply_changes(
            records,
            proc,
            {
                ref.root: f"CASE WHEN {ref.root}_raw IS NULL THEN {ref.root} ELSE _parsed END",
                f"{ref.root}_raw": "NULL",
            },
            problem=f"{ref.root}_raw IS NOT NULL AND _parsed IS NULL",
            problem_message=invalid,
            prelude={"_parsed": f"{TRY_PARSE_JSON_FUNCTION}({ref.root}_raw)"},
        )
    text = get_path(ref.root, ref.path, "string")
    return apply_changes(
        records,
        proc,
        {
            ref.root: f"CASE WHEN _text IS NULL THEN {ref.root} ELSE {set_path(ref.root, ref.path, '_parsed')} END"
        },
        problem="_text IS NOT NULL AND _parsed IS NULL",
        problem_message=invalid,
        prelude={"_text": text, "_parsed": try_parse_json_sql(text)},
    )
