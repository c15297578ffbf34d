"""Spark's progress events reach the engine as JSON, one py4j call each (``engine/progress.py``)."""

from __future__ import annotations

import json
import threading

import pytest
from pyspark.sql.streaming.listener import QueryProgressEvent

from airflow_conduit.engine.progress import Progress, ProgressListener, SourceProgress

pytestmark = pytest.mark.spark


def test_progress_of_every_batch_arrives_without_pyspark_s_converter(spark, tmp_path, monkeypatch):
    converted = []
    original = QueryProgressEvent.fromJObject.__func__

    def counting(cls, jevent):  # PySpark's per-field conversion (57-60 ms an event on 2 cores)
        converted.append(jevent)
        return original(cls, jevent)

    monkeypatch.setattr(QueryProgressEvent, "fromJObject", classmethod(counting))
    source = tmp_path / "in"
    source.mkdir()
    for i in range(3):
        (source / f"part-{i}.txt").write_text("".join(f"line {i}-{n}\n" for n in range(i + 1)))

    seen: list[Progress] = []
    arrived = threading.Condition()

    def on_progress(progress: Progress) -> None:
        with arrived:
            seen.append(progress)
            arrived.notify_all()

    listener = ProgressListener(on_progress)
    spark.streams.addListener(listener)
    try:
        query = (
            spark.readStream.option("maxFilesPerTrigger", 1)
            .text(str(source))
            .writeStream.queryName("progress-json")
            .format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        with arrived:  # the listener bus is asynchronous
            assert arrived.wait_for(lambda: len(seen) >= 3, timeout=30), seen
    finally:
        spark.streams.removeListener(listener)

    ours = [p for p in seen if p.name == "progress-json"]
    assert [p.batch_id for p in ours] == [0, 1, 2]
    assert {p.run_id for p in ours} == {str(query.runId)}
    # One file a batch (in modification time order, the same for all three here): 1, 2 and 3 lines.
    assert sorted(sum(s.input_rows for s in p.sources) for p in ours) == [1, 2, 3]
    assert all("triggerExecution" in p.durations_ms for p in ours)
    assert converted == []


def test_progress_json_without_a_name_or_rates():
    text = json.dumps(
        {
            "id": "5c0a4a4e-0000-4000-8000-000000000000",
            "runId": "9a0c1c5e-0000-4000-8000-000000000001",
            "name": None,
            "batchId": 4,
            "durationMs": {"addBatch": 12, "triggerExecution": 30},
            # Spark leaves out a rate that is not a number (the first batch's input rate).
            "processedRowsPerSecond": 125.5,
            "sources": [{"description": "FileStreamSource[file:/in]", "numInputRows": 7}],
        }
    )
    progress = Progress.from_json(text)
    assert progress == Progress(
        name=None,
        run_id="9a0c1c5e-0000-4000-8000-000000000001",
        batch_id=4,
        sources=(SourceProgress("FileStreamSource[file:/in]", 7),),
        durations_ms={"addBatch": 12, "triggerExecution": 30},
        input_rows_per_second=None,
        processed_rows_per_second=125.5,
    )
