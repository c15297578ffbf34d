"""``field.exclude``: remove fields (a whole payload part, or all metadata, when no nested path is given)."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import FieldRef, parse_field_list
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import FieldExcludeSettings
from airflow_conduit.engine.processors._expr import (
    EMPTY_METADATA,
    apply_changes,
    sql_str,
    unsupported,
    update_parent,
    where_field_exists,
)


def fields_of(proc: ProcessorConfig[FieldExcludeSettings]) -> list[FieldRef]:
    # As the config validated it: a comma inside .Metadata["a,b"] does not separate fields.
    return list(parse_field_list(proc.settings.fields))


def apply(records: DataFrame, proc: ProcessorConfig[FieldExcludeSettings]) -> DataFrame:
    for ref in fields_of(proc):
        if ref.root == "metadata" and ref.path:
            keep = f"map_filter(metadata, (k, v) -> k != {sql_str(ref.path[0])})"
            records = apply_changes(records, proc, {"metadata": keep})
        elif ref.root == "metadata":
            # `.Metadata` itself, as Conduit allows: every key.
            records = apply_changes(records, proc, {"metadata": EMPTY_METADATA})
        elif ref.root in ("key", "before", "after") and not ref.path:
            records = apply_changes(records, proc, {ref.root: "NULL", f"{ref.root}_raw": "NULL"})
        elif ref.root in ("key", "before", "after"):
            leaf = sql_str(ref.path[-1])
            changed = update_parent(ref.root, ref.path, f"map_filter({{m}}, (k, v) -> k != {leaf})")
            records = apply_changes(records, proc, {ref.root: where_field_exists(ref, changed)})
        else:
            raise unsupported(proc, ref)
    return records
