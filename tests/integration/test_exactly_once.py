"""Exactly once on real Spark: delivery hashes, per-destination markers, skipped replays, the DLQ."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_conduit.engine.connectors import jsonl_files
from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.delivery import delivery_hash, source_offsets
from tests.conftest import read_jsonl, text

# A custom.python destination that fails once per flag file, after the file destination published.
FLAKY_SINK = """
import json, os
from airflow_conduit.errors import TransientError

def sink(records, delivery_hash):
    flag = os.environ["FLAKY_SINK_FLAG"]
    if os.path.exists(flag):
        os.unlink(flag)
        raise TransientError("the sink is down")
    with open(os.environ["FLAKY_SINK_OUT"], "a") as out:
        for record in records:
            out.write(json.dumps({"hash": delivery_hash, "key": record["key"].decode()}) + "\\n")
"""

PIPELINE = """
version: "2.2"
pipelines:
  - id: eo
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 30, maxRecordsPerBatch: 10}}
      - {id: files, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
      - {id: sink, type: destination, plugin: custom.python, settings: {function: "flaky_sink:sink", path: "{tmp}/udf"}}
"""


@pytest.fixture
def flaky_sink(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """``flaky_sink:sink`` under ``{tmp}/udf``: fails once while the flag file exists, else appends the
    records it gets to the output file. Returns ``(flag, output)``."""
    (tmp_path / "udf").mkdir()
    (tmp_path / "udf" / "flaky_sink.py").write_text(FLAKY_SINK)
    flag, sink_out = tmp_path / "down", tmp_path / "sink.jsonl"
    monkeypatch.setenv("FLAKY_SINK_FLAG", str(flag))
    monkeypatch.setenv("FLAKY_SINK_OUT", str(sink_out))
    return flag, sink_out


def keys(directory: Path) -> list[int]:
    return [int(text(r["key"])) for r in read_jsonl(directory)]


def test_a_destination_that_committed_skips_the_replay_the_other_writes_it(run_yaml, tmp_path, flaky_sink):
    flag, sink_out = flaky_sink

    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    flag.touch()  # the next batch's sink call fails, after the file destination published it
    more = PIPELINE.replace("recordCount: 30", "recordCount: 50")
    payload = run_yaml(more)
    assert payload["exit_code"] == 75, payload
    assert payload["error"]["node"] == "eo:sink" and "the sink is down" in payload["error"]["message"]
    assert keys(tmp_path / "out") == list(range(40))  # batch 3 reached the files, not the sink

    payload = run_yaml(more)  # the restart replays batch 3: the files hold it, the sink does not
    assert payload["exit_code"] == 0, payload
    assert keys(tmp_path / "out") == list(range(50))  # every record exactly once
    sunk = [json.loads(line) for line in sink_out.read_text().splitlines()]
    assert [int(r["key"]) for r in sunk] == list(range(50))
    events = [
        json.loads(line) for line in (tmp_path / "state" / "eo" / "audit.jsonl").read_text().splitlines()
    ]
    skipped = [e for e in events if e.get("event") == "delivery_skipped"]
    assert [(e["batch"], e["destinations"]) for e in skipped] == [(3, ["files"])]
    assert payload["records"]["written"] == {"eo:files": 10, "eo:sink": 20}

    # The sink got each batch's delivery hash: Cues' hash of (pipeline, destination, offsets).
    checkpoint = tmp_path / "state" / "eo" / "checkpoint"
    by_batch = {batch: delivery_hash("eo", "sink", source_offsets(checkpoint, batch)) for batch in range(5)}
    assert [r["hash"] for r in sunk] == [by_batch[k // 10] for k in range(50)]


def test_the_delivery_hash_is_the_same_on_every_replay_of_a_batch(tmp_path):
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1}'
    (offsets / "7").write_text(f'v1\n{meta}\n{{"next": 40, "seed": 1}}\n{{"files": {{}}}}')
    first = delivery_hash("p", "out", source_offsets(tmp_path / "checkpoint", 7))
    # Spark rewrites nothing on replay, but a reordered offset JSON must not matter either.
    (offsets / "7").write_text(f'v1\n{meta}\n{{"seed": 1, "next": 40}}\n{{"files": {{}}}}')
    assert delivery_hash("p", "out", source_offsets(tmp_path / "checkpoint", 7)) == first
    assert delivery_hash("p", "other", source_offsets(tmp_path / "checkpoint", 7)) != first
    (offsets / "7").write_text(f'v1\n{meta}\n{{"seed": 1, "next": 41}}\n{{"files": {{}}}}')
    assert delivery_hash("p", "out", source_offsets(tmp_path / "checkpoint", 7)) != first


def test_a_crash_after_the_commit_rename_is_rolled_forward(spark, tmp_path):
    records = spark.range(0, 20, 1, 2).selectExpr(
        "CAST(CAST(id AS STRING) AS BINARY) AS position",
        "'create' AS operation",
        "CAST(NULL AS MAP<STRING,STRING>) AS metadata",
        "CAST(NULL AS VARIANT) AS key",
        "CAST(CAST(id AS STRING) AS BINARY) AS key_raw",
        "CAST(NULL AS VARIANT) AS before",
        "CAST(NULL AS BINARY) AS before_raw",
        "CAST(NULL AS VARIANT) AS after",
        "CAST('x' AS BINARY) AS after_raw",
    )
    out = tmp_path / "out"
    delivery = Delivery("p", "out", 3, "20260101T000000", "h-3")
    assert not jsonl_files.delivered(out, delivery)
    staged = jsonl_files.stage_jsonl(records, out, delivery)
    assert not list(out.glob("*.jsonl"))  # staged is invisible
    os.rename(staged.staging, staged.commit_dir)  # the commit point, then the process dies
    assert jsonl_files.delivered(out, delivery)  # rolled forward before answering
    assert sorted(int(text(r["key"])) for r in read_jsonl(out)) == list(range(20))
    assert not list(out.glob("_commit-*")) and not list(out.glob("_tmp-*"))
    assert not jsonl_files.delivered(out, Delivery("p", "out", 4, "20260101T000000", "h-4"))
    assert not jsonl_files.delivered(out, Delivery("p", "other", 3, "20260101T000000", "h-3"))


def test_a_replayed_batch_is_not_written_twice_to_the_dlq(run_yaml, tmp_path, flaky_sink):
    flag, sink_out = flaky_sink
    flag.touch()  # the DLQ plugin fails once, after the state dir's DLQ store published the nacks
    pipeline = """
version: "2.2"
pipelines:
  - id: d
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 20, maxRecordsPerBatch: 10}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
    processors:
      - {id: odd, plugin: error, condition: "CAST(.Key AS INT) % 2 = 1", settings: {message: odd}}
    dead-letter-queue:
      plugin: custom.python
      settings: {function: "flaky_sink:sink", path: "{tmp}/udf"}
      window-size: 0
"""
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 75, payload
    assert payload["error"]["node"] == "d:dlq"
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 0, payload
    dlq_store = tmp_path / "state" / "d" / "dlq"
    assert sorted(int(text(r["position"])) for r in read_jsonl(dlq_store)) == list(range(1, 20, 2))
    assert sorted(int(json.loads(line)["key"]) for line in sink_out.read_text().splitlines()) == list(
        range(1, 20, 2)
    )
    assert keys(tmp_path / "out") == list(range(0, 20, 2))


CONTEXT_UDF = """
def tag(record, context):
    record["metadata"]["hash"] = context["delivery_hash"]
    record["metadata"]["batch"] = str(context["batch_id"])
    return record
"""


def test_custom_python_processors_read_the_batch_delivery_hash(run_yaml, tmp_path):
    (tmp_path / "udf").mkdir()
    (tmp_path / "udf" / "ctx_udf.py").write_text(CONTEXT_UDF)
    pipeline = """
version: "2.2"
pipelines:
  - id: c
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 12, maxRecordsPerBatch: 5}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
    processors:
      - {id: tag, plugin: custom.python, settings: {function: "ctx_udf:tag", path: "{tmp}/udf"}}
"""
    assert run_yaml(pipeline)["exit_code"] == 0
    checkpoint = tmp_path / "state" / "c" / "checkpoint"
    out = read_jsonl(tmp_path / "out")
    assert [int(r["metadata"]["batch"]) for r in out] == [k // 5 for k in range(12)]
    for record in out:
        batch = int(record["metadata"]["batch"])
        assert record["metadata"]["hash"] == delivery_hash("c", "c:tag", source_offsets(checkpoint, batch))


def test_a_failed_publish_releases_the_postgres_transaction_and_the_restart_completes(
    run_yaml, tmp_path, flaky_sink, pg
):
    flag, sink_out = flaky_sink
    url = pg.create_database("eo_release")
    pg.execute("CREATE TABLE items (order_id bigint PRIMARY KEY, amount bigint)", "eo_release")
    pg.execute("GRANT ALL ON items TO conduit", "eo_release")
    # The sink publishes first and fails: the Postgres destination has staged the batch in an open
    # transaction holding its delivery-marker row; it must be rolled back, not left to block the restart.
    pipeline = f"""
version: "2.2"
pipelines:
  - id: rel
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings: {{recordCount: 30, maxRecordsPerBatch: 10, format.options.order_id: int, format.options.amount: int}}
      - {{id: sink, type: destination, plugin: custom.python, settings: {{function: "flaky_sink:sink", path: "{{tmp}}/udf"}}}}
      - {{id: db, type: destination, plugin: builtin:postgres, settings: {{url: "{url}", table: items, key: order_id}}}}
"""
    flag.touch()
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 75 and payload["error"]["node"] == "rel:sink", payload
    open_transactions = pg.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = 'eo_release' AND state LIKE 'idle in transaction%'"
    )
    assert open_transactions == [(0,)]
    assert pg.execute("SELECT count(*) FROM items", "eo_release") == [(0,)]  # rolled back, not committed

    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 0, payload
    assert pg.execute("SELECT count(*) FROM items", "eo_release") == [(30,)]
    assert len(sink_out.read_text().splitlines()) == 30
