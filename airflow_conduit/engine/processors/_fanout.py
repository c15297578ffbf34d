"""What ``clone`` and ``split`` share: one row per piece, with Conduit's index metadata and ``_piece``."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.engine.processors._expr import EMPTY_METADATA, sql_str


def explode_pieces(records: DataFrame, pieces_sql: str, index_key: str, changes: dict[str, str]) -> DataFrame:
    """One row per element of ``pieces_sql`` (an array, NULL for a record the processor leaves as it
    is), the element as ``_item`` and its index as ``_index`` for ``changes`` (column -> SQL, applied
    to the pieces only). Each piece gets ``index_key`` in its metadata and its index appended to
    ``_piece``; rows keep their order, so a partition stays in source order."""
    exploded = records.select(
        "*", F.expr(f"posexplode(coalesce({pieces_sql}, array(NULL))) AS (_index, _item)")
    ).withColumn("_split", F.expr(f"({pieces_sql}) IS NOT NULL"))
    piece_changes = {
        **changes,
        "metadata": f"map_concat(coalesce(metadata, {EMPTY_METADATA}), "
        f"map({sql_str(index_key)}, cast(_index as string)))",
        "_piece": "concat(_piece, array(_index))",
    }
    columns = {
        column: F.expr(f"CASE WHEN _split THEN {sql} ELSE {column} END")
        for column, sql in piece_changes.items()
    }
    return exploded.withColumns(columns).drop("_index", "_item", "_split")
