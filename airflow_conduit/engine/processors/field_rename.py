"""``field.rename``: ``mapping: .Payload.After.a:b,.Metadata.x:y`` renames fields in place."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref, parse_rename_mapping
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import FieldRenameSettings
from airflow_conduit.engine.processors._expr import (
    apply_changes,
    sql_str,
    unsupported,
    update_parent,
    where_field_exists,
)


def mapping_of(proc: ProcessorConfig[FieldRenameSettings]) -> list[tuple[str, str]]:
    # As the config validated it: `,` and `:` inside .Metadata["a:b,c"] do not separate entries.
    return [(str(ref), new) for ref, new in parse_rename_mapping(proc.settings.mapping)]


def rename_keys(map_sql: str, old: str, new: str) -> str:
    return f"transform_keys({map_sql}, (k, v) -> CASE WHEN k = {sql_str(old)} THEN {sql_str(new)} ELSE k END)"


def apply(records: DataFrame, proc: ProcessorConfig[FieldRenameSettings]) -> DataFrame:
    for old_text, new_name in mapping_of(proc):
        ref = parse_field_ref(old_text)
        if ref.root == "metadata" and ref.path:
            records = apply_changes(
                records, proc, {"metadata": rename_keys("metadata", ref.path[0], new_name)}
            )
        elif ref.root in ("key", "before", "after") and ref.path:
            changed = update_parent(ref.root, ref.path, rename_keys("{m}", ref.path[-1], new_name))
            records = apply_changes(records, proc, {ref.root: where_field_exists(ref, changed)})
        else:
            raise unsupported(proc, ref)
    return records
