"""The batch log of real runs: one entry per committed batch whose counts add up to the exit payload's,
the file source's lag, and where a run came from (the ``started`` event and ``status.json``)."""

from __future__ import annotations

import json
import os

import psycopg
import pytest

from airflow_conduit.batch_log import read_batches
from airflow_conduit.config import load_pipeline_text
from airflow_conduit.engine.connectors.postgres.decoding import lsn_to_int
from airflow_conduit.engine.job import RunOptions
from airflow_conduit.engine.runner import run_pipeline
from airflow_conduit.state import PipelineState, parse_time

pytestmark = pytest.mark.spark

NACKING = """
version: "2.2"
pipelines:
  - id: counted
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 100, maxRecordsPerBatch: 30}}
      - {id: all, type: destination, plugin: builtin:file, settings: {path: "{tmp}/all"}}
      - id: evens
        type: destination
        plugin: builtin:file
        settings: {path: "{tmp}/evens"}
        processors:
          - {id: odd-out, plugin: filter, condition: "CAST(.Key AS INT) % 2 = 1"}
    processors:
      - {id: drop, plugin: filter, condition: "CAST(.Key AS INT) % 10 = 3"}
      - id: reject
        plugin: error
        condition: "CAST(.Key AS INT) % 7 = 2"
        settings: {message: "rejected for the batch log test"}
    dead-letter-queue:
      plugin: builtin:log
      window-size: 0
"""


def test_one_entry_per_batch_adding_up_to_the_exit_payload(run_yaml, tmp_path):
    payload = run_yaml(NACKING)
    assert payload["exit_code"] == 0, payload
    records = payload["records"]
    assert payload["batches"] >= 3 and records["dlq"] > 0 and records["filtered"] > 0

    entries = read_batches(PipelineState(tmp_path / "state", "counted"))
    assert len(entries) == payload["batches"]
    assert [e.batch for e in entries] == list(range(len(entries)))
    assert {e.run_started_at for e in entries} == {payload["started_at"]}
    assert sum(e.read for e in entries) == records["read"] == 100
    assert sum(e.dlq for e in entries) == records["dlq"]
    assert sum(e.filtered for e in entries) == records["filtered"]
    summed: dict[str, int] = {}
    for e in entries:
        assert e.written == sum(e.written_by.values())
        for node, count in e.written_by.items():
            summed[node] = summed.get(node, 0) + count
    assert summed == records["written"]
    assert set(summed) == {"counted:all", "counted:evens"}
    run_start, run_end = parse_time(payload["started_at"]), parse_time(payload["ended_at"])
    for e in entries:
        started, ended = parse_time(e.started_at), parse_time(e.ended_at)
        assert run_start <= started <= ended <= run_end
        assert 0 < e.seconds <= (ended - started).total_seconds() + 0.01
        assert e.lag == {}  # the generator reports no lag

    # A second run appends its own batches under its own start.
    again = run_yaml(NACKING.replace("recordCount: 100", "recordCount: 130"))
    later = read_batches(PipelineState(tmp_path / "state", "counted"))
    assert later[: len(entries)] == entries
    assert {e.run_started_at for e in later[len(entries) :]} == {again["started_at"]}
    assert sum(e.read for e in later[len(entries) :]) == again["records"]["read"] == 30


def test_file_source_lag_goes_down_to_zero(run_yaml, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    # Lines of different lengths over two files: each batch's lag is the bytes of the lines after it.
    lines = {
        "a.txt": [f"a{i}:" + "x" * (i * 3) for i in range(7)],
        "b.txt": [f"b{i}:" + "y" * (i * 5 + 1) for i in range(6)],
    }
    for name, content in lines.items():
        (source / name).write_text("".join(line + "\n" for line in content))
    sizes = [len(line) + 1 for name in sorted(lines) for line in lines[name]]
    payload = run_yaml(
        """
version: "2.2"
pipelines:
  - id: lagging
    connectors:
      - {id: in, type: source, plugin: builtin:file, settings: {path: "{tmp}/in", maxRecordsPerBatch: 4}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
"""
    )
    assert payload["exit_code"] == 0, payload
    entries = read_batches(PipelineState(tmp_path / "state", "lagging"))
    assert len(entries) == payload["batches"] == 4  # 13 lines, 4 a batch
    lags = [e.lag["lagging:in"] for e in entries]
    assert {lag.unit for lag in lags} == {"bytes"}
    read = 0
    for entry, lag in zip(entries, lags, strict=True):
        read += entry.read
        assert lag.value == sum(sizes[read:])
    assert lags[0].value > lags[1].value > lags[2].value > lags[3].value == 0


def test_started_event_and_status_say_where_the_run_came_from(spark, tmp_path, monkeypatch):
    pipeline_file = tmp_path / "pipelines" / "origin.yaml"
    pipeline_file.parent.mkdir()
    pipeline_file.write_text(
        """
version: "2.2"
pipelines:
  - id: origin
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 5}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "TMP/out"}}
""".replace("TMP", str(tmp_path))
    )
    config = load_pipeline_text(pipeline_file.read_text(), str(pipeline_file)).pipelines[0]
    options = RunOptions(until_idle=True, pipeline_file=str(pipeline_file))
    state = PipelineState(tmp_path / "state", "origin")
    for name in [n for n in os.environ if n.startswith("AIRFLOW_CTX_")]:
        monkeypatch.delenv(name)

    payload = run_pipeline(spark, config, state.state_dir, options)  # not started by Airflow
    assert payload["exit_code"] == 0, payload
    started = [e for e in state.read_audit() if e["event"] == "started"]
    assert started[-1]["file"] == str(pipeline_file)
    assert started[-1]["master"] == spark.sparkContext.master == "local[2]"
    assert started[-1]["airflow"] is None

    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "orders_dag")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2025-01-02T03:04:05+00:00")
    monkeypatch.setenv("AIRFLOW_CTX_TASK_ID", "run_orders")
    monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", "3")
    monkeypatch.setenv("AIRFLOW_CTX_MAP_INDEX", "2")
    payload = run_pipeline(spark, config, state.state_dir, options)
    assert payload["exit_code"] == 0, payload
    airflow = {
        "dag_id": "orders_dag",
        "run_id": "manual__2025-01-02T03:04:05+00:00",
        "task_id": "run_orders",
        "try_number": 3,
        "map_index": 2,
    }
    started = [e for e in state.read_audit() if e["event"] == "started"]
    assert len(started) == 2
    assert started[-1]["airflow"] == airflow
    assert started[-1]["file"] == str(pipeline_file) and started[-1]["mode"] == "until_idle"
    status = state.read_status()
    assert status is not None and status["status"] == "stopped"
    assert (status["file"], status["master"], status["airflow"]) == (str(pipeline_file), "local[2]", airflow)


PG_PIPELINE = """
version: "2.2"
pipelines:
  - id: pg-lag
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings: {url: "URL", tables: items, logrepl.slotName: lagslot, maxRecordsPerBatch: 2}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
"""


def test_postgres_source_lag_is_the_wal_after_each_batch(pg, run_yaml, tmp_path):
    url = pg.create_database("pg_lag")

    def wal_now() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            return lsn_to_int(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, pad text)")
        conn.execute("INSERT INTO items VALUES (0, 'snapshot')")
    text = PG_PIPELINE.replace("URL", url)
    first = run_yaml(text)
    assert first["exit_code"] == 0 and first["records"]["read"] == 1, first
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(1, 7):  # six transactions of ~3 kB of WAL each (random: no compression)
            conn.execute("INSERT INTO items VALUES (%s, %s)", (i, os.urandom(1500).hex()))
    low = wal_now()
    second = run_yaml(text)
    high = wal_now()
    assert second["exit_code"] == 0 and second["records"]["read"] == 6, second

    state = PipelineState(tmp_path / "state", "pg-lag")
    entries = [e for e in read_batches(state) if e.run_started_at == second["started_at"]]
    assert len(entries) == second["batches"] == 3
    offsets = state.checkpoint_dir / "offsets"
    for entry in entries:
        lag = entry.lag["pg-lag:pg"]
        assert lag.unit == "WAL bytes"
        end = json.loads((offsets / str(entry.batch)).read_text().splitlines()[-1])
        assert end["phase"] == "cdc"
        # The WAL from the batch's end LSN to the server's, taken between the two readings.
        assert low - lsn_to_int(end["lsn"]) <= lag.value <= high - lsn_to_int(end["lsn"])
    values = [e.lag["pg-lag:pg"].value for e in entries]
    assert values[0] > values[1] > values[2] and values[0] - values[2] >= 4 * 1500
