"""A stop whose batch in flight outlasts the stop timeout becomes forceful: the batch is dropped, the
run ends transient, and a restart reads it again."""

from __future__ import annotations

import time

from tests.conftest import read_jsonl, text

SLOW = """\
import os
import time


def slow(record):
    # The first record processed tells the test a batch is in flight; each record then takes a while.
    open(os.path.join(os.path.dirname(__file__), "in-flight"), "w").close()
    time.sleep(0.05)
    return record
"""

PIPELINE = """
version: "2.2"
pipelines:
  - id: slow
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 300, maxRecordsPerBatch: 100}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
    processors:
      - {id: slow, plugin: custom.python, settings: {function: "slowmod:slow", path: "{tmp}"}}
"""


def test_stop_timeout_drops_the_batch_in_flight_and_restart_reads_it_again(spark, tmp_path, run_yaml):
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import PipelineRun, RunOptions
    from airflow_conduit.state import PipelineState

    (tmp_path / "slowmod.py").write_text(SLOW)
    config = load_pipeline_text(PIPELINE.replace("{tmp}", str(tmp_path)), "<slow>").pipelines[0]
    state = PipelineState.of(tmp_path / "state", "slow")
    run = PipelineRun(spark, config, state, RunOptions(stop_timeout=1.0)).start()
    deadline = time.monotonic() + 120
    while not (tmp_path / "in-flight").exists():
        assert time.monotonic() < deadline, "no batch started"
        time.sleep(0.1)
    run.request_stop()  # a batch of 100 records at 50 ms each cannot finish within 1 s
    payload = run.wait()
    assert payload["exit_code"] == 75, payload
    assert payload["error"]["code"] == "stop_timeout"
    commits = {p.name for p in (state.checkpoint_dir / "commits").glob("[0-9]*")}
    offsets = {p.name for p in (state.checkpoint_dir / "offsets").glob("[0-9]*")}
    assert offsets - commits  # the batch in flight was begun and never committed

    restarted = run_yaml(PIPELINE.replace("{tmp}", str(tmp_path)), state_dir=tmp_path / "state")
    assert restarted["exit_code"] == 0, restarted
    keys = sorted(int(text(r["key"])) for r in read_jsonl(tmp_path / "out"))
    assert keys == list(range(300))  # the dropped batch was read again; nothing lost, nothing twice
