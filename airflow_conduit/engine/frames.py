"""A micro-batch's DataFrame steps built from SQL text, each in one Py4J call.

The engine plans every micro-batch again in the driver, and PySpark's DataFrame calls cost a Py4J round
trip per column at least: a list of expressions goes to the JVM an element at a time, and each column
made in Python (``F.col``, ``F.expr``, ``==``) is a call or more of its own. A continuous file pipeline's
micro-batch made about 340 calls while the engine planned it (about 50 with this module). The steps here
hand the JVM one JSON array of SQL text instead (``Frames`` in engine/java/ConduitFunctions.java): on
this project's 2-core machine a ``selectExpr`` of ten names took 3.1-4.0 ms, and 2.2-2.3 ms as one call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from airflow_conduit.engine.sql_functions import function_instance

FRAMES_CLASS = "org.airflowconduit.ConduitFunctions$Frames"


def _frames(frame: DataFrame) -> Any:
    return function_instance(frame.sparkSession, FRAMES_CLASS)


def _wrapped(frame: DataFrame, java_frame: Any) -> DataFrame:
    return ClassicDataFrame(java_frame, frame.sparkSession)


def select_sql(frame: DataFrame, expressions: Sequence[str]) -> DataFrame:
    """``frame.selectExpr(*expressions)``."""
    return _wrapped(frame, _frames(frame).selectExpr(frame._jdf, json.dumps(list(expressions))))


def with_sql(frame: DataFrame, *steps: Mapping[str, str], drop: Sequence[str] = ()) -> DataFrame:
    """``frame.withColumns({name: F.expr(sql)})`` for each step in turn (each sees the columns of the
    steps before: a column replaced where it stands, or added), then ``drop(*drop)``."""
    names = json.dumps([list(step) for step in steps])
    expressions = json.dumps([list(step.values()) for step in steps])
    return _wrapped(frame, _frames(frame).withSteps(frame._jdf, names, expressions, json.dumps(list(drop))))


def drop_columns(frame: DataFrame, names: Sequence[str]) -> DataFrame:
    """``frame.drop(*names)``."""
    return with_sql(frame, drop=names)


def in_state(state: str) -> str:
    """The SQL condition that a record is in ``state`` (one of :mod:`airflow_conduit.record`'s), for
    ``filter``: a string is one call, where ``F.col("_state") == state`` is several."""
    return f"_state = '{state}'"
