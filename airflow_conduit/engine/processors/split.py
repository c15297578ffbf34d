"""``split``: one record per element of an array field, the element in the field's place and its index
in ``split.index``. A field that is not an array nacks the record; an empty array filters it, as
Conduit does with a ``MultiRecord`` of none."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings.fanout import SplitSettings
from airflow_conduit.engine.processors._expr import (
    active_sql,
    json_path,
    raw_problem,
    raw_problem_message,
    set_path,
    sql_str,
)
from airflow_conduit.engine.processors._fanout import explode_pieces


def apply(records: DataFrame, proc: ProcessorConfig[SplitSettings]) -> DataFrame:
    field = proc.settings.field
    ref = parse_field_ref(field)
    node = sql_str(proc.node_id)
    not_a_slice = sql_str(f'field "{field}" is not a slice')
    records = records.withColumn("_acts", F.expr(active_sql(proc))).withColumn(
        "_array",
        F.expr(
            f"CASE WHEN _acts THEN try_variant_get({ref.root}, {json_path(ref.path)}, 'array<variant>') END"
        ),
    )
    decided = {
        "_state": "CASE WHEN _raw THEN 'nacked' WHEN _array IS NULL THEN 'nacked' "
        "WHEN size(_array) = 0 THEN 'filtered' ELSE _state END",
        "_error": f"CASE WHEN _raw THEN {raw_problem_message(proc, field)} "
        f"WHEN _array IS NULL THEN {not_a_slice} ELSE _error END",
        "_node": f"CASE WHEN _raw OR _array IS NULL OR size(_array) = 0 THEN {node} ELSE _node END",
    }
    records = records.withColumn("_raw", F.expr(f"coalesce({raw_problem(ref)}, false)")).withColumns(
        {column: F.expr(f"CASE WHEN _acts THEN {sql} ELSE {column} END") for column, sql in decided.items()}
    )
    pieces = "CASE WHEN _acts AND NOT _raw AND size(_array) > 0 THEN _array END"
    placed = set_path(ref.root, ref.path, "_item") if ref.path else "_item"
    return explode_pieces(records, pieces, "split.index", {ref.root: placed}).drop("_acts", "_array", "_raw")
