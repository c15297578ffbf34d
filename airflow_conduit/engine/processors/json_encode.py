"""``json.encode``: turn structured data in a field into JSON text (raw bytes for a whole payload)."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import JsonEncodeSettings
from airflow_conduit.engine.processors._expr import apply_changes, get_path, set_path, unsupported
from airflow_conduit.record import variant_json_sql


def apply(records: DataFrame, proc: ProcessorConfig[JsonEncodeSettings]) -> DataFrame:
    ref = parse_field_ref(proc.settings.field)
    if ref.root not in ("key", "before", "after"):
        raise unsupported(proc, ref)
    if not ref.path:
        return apply_changes(
            records,
            proc,
            {
                f"{ref.root}_raw": f"CASE WHEN {ref.root} IS NULL THEN {ref.root}_raw ELSE cast({variant_json_sql(ref.root)} as binary) END",
                ref.root: "NULL",
            },
        )
    value = get_path(ref.root, ref.path)
    encoded = set_path(ref.root, ref.path, f"cast({variant_json_sql(value)} as variant)")
    return apply_changes(
        records, proc, {ref.root: f"CASE WHEN {value} IS NULL THEN {ref.root} ELSE {encoded} END"}
    )
