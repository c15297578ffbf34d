"""``field.set``: set a field to a value (the whole raw value when the field is ``.Payload.After``)."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import FieldSetSettings
from airflow_conduit.engine.processors._expr import (
    EMPTY_METADATA,
    apply_changes,
    raw_problem,
    raw_problem_message,
    set_path,
    sql_str,
    unsupported,
)
from airflow_conduit.engine.processors._templates import setting_sql
from airflow_conduit.record import OPERATIONS


def apply(records: DataFrame, proc: ProcessorConfig[FieldSetSettings]) -> DataFrame:
    ref = parse_field_ref(proc.settings.field)
    value = setting_sql(proc, "value")
    if ref.root == "operation":
        # A fixed value was checked at validate; a template's is known per record, as in Conduit.
        known = ", ".join(sql_str(op) for op in OPERATIONS)
        return apply_changes(
            records,
            proc,
            {"operation": value},
            problem=f"({value}) NOT IN ({known})",
            problem_message=f"concat('invalid operation \"', {value}, '\"')",
        )
    if ref.root == "metadata":
        if not ref.path:
            raise unsupported(proc, ref)
        merged = f"map_concat(coalesce(metadata, {EMPTY_METADATA}), map({sql_str(ref.path[0])}, {value}))"
        return apply_changes(records, proc, {"metadata": merged})
    if ref.root in ("key", "before", "after"):
        if not ref.path:
            return apply_changes(
                records, proc, {ref.root: "NULL", f"{ref.root}_raw": f"cast({value} as binary)"}
            )
        return apply_changes(
            records,
            proc,
            {ref.root: set_path(ref.root, ref.path, f"cast({value} as variant)")},
            problem=raw_problem(ref),
            problem_message=raw_problem_message(proc, proc.settings.field),
        )
    raise unsupported(proc, ref)
