"""The engine's DataFrame steps from SQL text in one Py4J call each (``engine/frames.py``): the same
frames as PySpark's own calls."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.config.fieldref import sql_string
from airflow_conduit.engine.frames import drop_columns, in_state, select_sql, with_sql
from airflow_conduit.record import STATE_NACKED, STATE_OPEN

# Quotes, a backslash, a NUL, non-ASCII and a JSON-looking text: each must reach Spark's parser as written.
AWKWARD = 'it\'s "q" \\ \x00 é {"a": [1]}'


@pytest.fixture
def frame(spark) -> DataFrame:
    return spark.range(6, numPartitions=2).selectExpr(
        "id", "CAST(id * 10 AS INT) AS a", f"IF(id % 3 = 0, '{STATE_NACKED}', '{STATE_OPEN}') AS _state"
    )


def test_select_sql_is_select_expr(frame):
    expressions = ["a", "id * 2 AS twice", "concat('x', CAST(a AS STRING)) AS text"]
    chosen = select_sql(frame, expressions)
    assert chosen.schema == frame.selectExpr(*expressions).schema
    assert chosen.collect() == frame.selectExpr(*expressions).collect()


def test_text_with_quotes_and_nul_reaches_spark_as_written(frame):
    [row] = select_sql(frame.limit(1), [f"{sql_string(AWKWARD)} AS v"]).collect()
    assert row.v == AWKWARD
    [row] = with_sql(frame.limit(1), {"v": sql_string(AWKWARD)}).collect()
    assert row.v == AWKWARD


def test_with_sql_steps_see_the_steps_before_and_keep_column_places(frame):
    stepped = with_sql(
        frame,
        {"b": "a + 1"},
        {},  # an empty step changes nothing
        {"a": "b * 2", "c": "a + b"},  # a replaced in place; c sees the a of before this step
        drop=["b"],
    )
    expected = (
        frame.withColumn("b", F.expr("a + 1"))
        .withColumns({"a": F.expr("b * 2"), "c": F.expr("a + b")})
        .drop("b")
    )
    assert stepped.columns == ["id", "a", "_state", "c"]
    assert stepped.collect() == expected.collect()


def test_drop_columns_ignores_a_missing_name_as_drop_does(frame):
    assert drop_columns(frame, ["a", "not_there"]).columns == frame.drop("a", "not_there").columns


def test_in_state_filters_one_state(frame):
    open_ids = [r.id for r in frame.filter(in_state(STATE_OPEN)).collect()]
    assert sorted(open_ids) == [1, 2, 4, 5]
