"""``field.convert``: convert a field to ``string``, ``int``, ``float`` or ``bool`` (Spark SQL), or to
``time`` (in Python, with Go's parsing); a value that does not convert nacks the record."""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import FieldConvertSettings
from airflow_conduit.engine.processors._expr import (
    apply_changes,
    get_path,
    raw_problem,
    set_path,
    sql_str,
    unsupported,
)
from airflow_conduit.engine.processors.custom_python import apply_builtin

SPARK_TYPES = {"string": "string", "int": "bigint", "float": "double", "bool": "boolean"}


def apply(records: DataFrame, proc: ProcessorConfig[FieldConvertSettings]) -> DataFrame:
    if proc.settings.type == "time":
        return apply_builtin(records, proc, "airflow_conduit.engine.processors.field_convert_time:make")
    ref = parse_field_ref(proc.settings.field)
    target = proc.settings.type
    spark_type = SPARK_TYPES[target]
    failed = sql_str(f"field.convert: {proc.settings.field} cannot be converted to {target}")
    if ref.root == "metadata" and ref.path:
        original = f"metadata[{sql_str(ref.path[0])}]"
        converted = f"cast(try_cast({original} as {spark_type}) as string)"
        changes = {"metadata": f"map_concat(metadata, map({sql_str(ref.path[0])}, _converted))"}
    elif ref.root in ("key", "before", "after") and ref.path:
        original = get_path(ref.root, ref.path)
        converted = get_path(ref.root, ref.path, spark_type)
        changes = {ref.root: set_path(ref.root, ref.path, "cast(_converted as variant)")}
    else:
        raise unsupported(proc, ref)
    problem = f"({original} IS NOT NULL AND _converted IS NULL)"
    if ref.root != "metadata":
        problem = f"({raw_problem(ref)}) OR {problem}"
    return apply_changes(
        records,
        proc,
        {
            column: f"CASE WHEN {original} IS NULL THEN {column} ELSE {sql} END"
            for column, sql in changes.items()
        },
        problem=problem,
        problem_message=failed,
        prelude={"_converted": converted},
    )
