"""A micro-batch's records counted by state as its write computes them (``engine/tally.py``)."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

from airflow_conduit.engine import batch as batch_module
from airflow_conduit.engine.batch import STATES, state_counts
from airflow_conduit.engine.tally import StateTally
from airflow_conduit.record import opencdc_json_sql
from tests.integration.test_fanout import pipeline

PIECES = "array(array(), array(0), array(1), array(0, 0), array(0, 1), array(2, 0), array(0, 0, 3))"


def records(spark, n: int = 5_000) -> DataFrame:
    """Rows in every state, unsplit and in pieces, over four partitions: the record columns' internal
    part is what the tally reads."""
    states = ", ".join(f"'{s}'" for s in STATES)
    return spark.range(n, numPartitions=4).selectExpr(
        "id AS _seq",
        f"element_at(array({states}), CAST(id * 7 % {len(STATES)} AS INT) + 1) AS _state",
        f"CAST(element_at({PIECES}, CAST(id % 7 AS INT) + 1) AS array<int>) AS _piece",
    )


def expected(frame: DataFrame) -> Counter[str]:
    """What the aggregate the tally replaces (and the fallback runs) gives."""
    return Counter(frame.agg(*state_counts()).collect()[0].asDict())


def test_the_tally_counts_what_the_aggregate_counts_as_the_write_computes_the_rows(spark):
    frame = records(spark)
    tally = StateTally(spark, STATES)
    written = tally.tallied(frame).filter("_state = 'open'")
    assert tally.counts() == Counter(dict.fromkeys([*STATES, "total", "filtered_records"], 0))

    written.write.format("noop").mode("overwrite").save()

    counts = tally.counts()
    reference = expected(frame)
    assert counts == reference
    assert 0 < counts["filtered_records"] < counts["filtered"]  # the heads among the pieces only
    assert 0 < counts["total"] < sum(counts[s] for s in STATES)
    assert written.count() == reference["open"]  # the state passes through unchanged


def test_a_partition_computed_twice_gives_no_counts(spark):
    tally = StateTally(spark, STATES)
    tallied = tally.tallied(records(spark))
    tallied.write.format("noop").mode("overwrite").save()
    assert tally.counts() is not None
    tallied.write.format("noop").mode("overwrite").save()
    assert tally.counts() is None


def test_the_counted_write_stays_in_one_piece_of_generated_code(spark):
    """An ``observe``, or a lambda in the head test, would split the write's generated code: each row
    would cross the split as a copied row (about 0.5 s of a 1M-record batch)."""
    tally = StateTally(spark, STATES)
    frame = records(spark).selectExpr(
        "CAST('c' AS BINARY) AS position",
        "'create' AS operation",
        "map('k', 'v') AS metadata",
        "CAST(NULL AS VARIANT) AS key",
        "CAST(NULL AS BINARY) AS key_raw",
        "CAST(NULL AS VARIANT) AS before",
        "CAST(NULL AS BINARY) AS before_raw",
        "parse_json('{\"a\": 1}') AS after",
        "CAST(NULL AS BINARY) AS after_raw",
        "*",
    )
    lines = tally.tallied(frame).filter("_state = 'open'").selectExpr(f"{opencdc_json_sql()} AS value")
    plan = lines._jdf.queryExecution().executedPlan().toString()
    [counted] = [line for line in plan.splitlines() if "UDF(" in line]
    assert counted.lstrip(" +-:").startswith("*("), plan


def test_a_batch_computed_twice_while_staging_is_counted_again(run_yaml, tmp_path: Path, monkeypatch, caplog):
    """A destination that computes its records twice as it stages would count them twice: the batch
    counts them again from the rows instead."""
    stage = batch_module.plugins.stage

    def stage_twice(plugin, rows, settings, delivery):
        rows.write.format("noop").mode("overwrite").save()
        return stage(plugin, rows, settings, delivery)

    monkeypatch.setattr(batch_module.plugins, "stage", stage_twice)
    with caplog.at_level(logging.WARNING, logger="airflow_conduit.engine"):
        payload = run_yaml(
            pipeline(tmp_path, "      - {id: split, plugin: split, settings: {field: .Payload.After.users}}")
        )
    assert payload["exit_code"] == 0, payload
    assert "counted again" in caplog.text
    records_ = payload["records"]
    # Five source records: one filtered (an empty array), one nacked; six pieces written.
    assert (records_["read"], records_["acked"], records_["filtered"], records_["nacked"]) == (5, 4, 1, 1)
    assert records_["written"] == {"fan:out": 6}


@pytest.mark.parametrize(
    ("piece", "head"),
    [([], True), ([0], True), ([0, 0], True), ([1], False), ([0, 1], False), ([2, 0], False)],
)
def test_the_first_piece_stands_for_its_record(spark, piece, head):
    [row] = (
        spark.createDataFrame([(piece,)], "_piece array<int>")
        .selectExpr(f"{batch_module.HEAD_PIECE_SQL} AS head")
        .collect()
    )
    assert row.head is head
