"""``field.exclude``: remove fields (a whole payload part when no nested path is given)."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors._expr import (
    apply_changes,
    raw_problem,
    sql_str,
    unsupported,
    update_parent,
)


def fields_of(proc: ProcessorConfig) -> list[str]:
    fields = proc.settings["fields"]
    if isinstance(fields, str):
        fields = fields.split(",")
    return [f.strip() for f in fields if str(f).strip()]


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    for text in fields_of(proc):
        ref = parse_field_ref(text)
        if ref.root == "metadata" and ref.path:
            keep = f"map_filter(metadata, (k, v) -> k != {sql_str(ref.path[0])})"
            records = apply_changes(records, proc, {"metadata": keep})
        elif ref.root in ("key", "before", "after") and not ref.path:
            records = apply_changes(records, proc, {ref.root: "NULL", f"{ref.root}_raw": "NULL"})
        elif ref.root in ("key", "before", "after"):
            leaf = sql_str(ref.path[-1])
            changed = update_parent(ref.root, ref.path, f"map_filter({{m}}, (k, v) -> k != {leaf})")
            # Excluding a field of raw data is a no-op, as there is no field to remove.
            records = apply_changes(
                records, proc, {ref.root: f"CASE WHEN {raw_problem(ref)} THEN {ref.root} ELSE {changed} END"}
            )
        else:
            raise unsupported(proc, ref)
    return records
