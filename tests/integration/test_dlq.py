"""The DLQ window on real micro-batches: which record crosses the threshold, and that it is fatal."""

from __future__ import annotations

import json

from tests.conftest import read_jsonl, text

PIPELINE = """
version: "2.2"
pipelines:
  - id: win
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 200, maxRecordsPerBatch: 50}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
    processors:
      - id: reject
        plugin: error
        condition: "CAST(.Key AS INT) IN (%s)"
        settings: {message: rejected}
    dead-letter-queue:
      plugin: builtin:file
      settings: {path: "{tmp}/dlq"}
      window-size: %d
      window-nack-threshold: %d
"""


def test_the_nack_past_the_threshold_is_fatal_and_its_batch_is_not_written(run_yaml, tmp_path):
    # Window of 10 records tolerates 2 nacks: 5 and 60 are far apart, 120/125/128 are three in ten.
    payload = run_yaml(PIPELINE % ("5, 60, 120, 125, 128", 10, 2))
    assert payload["exit_code"] == 1
    assert payload["status"] == "degraded"
    error = payload["error"]
    assert error["kind"] == "fatal" and error["code"] == "dlq_threshold_exceeded"
    assert "position 128" in error["message"] and "rejected" in error["message"]
    assert error["node"] == "win:reject"
    # Batches 0-1 (records 0-99) committed; batch 2 (100-149) held the crossing nack: nothing of it.
    keys = [int(text(r["key"])) for r in read_jsonl(tmp_path / "out")]
    assert keys == [k for k in range(100) if k not in (5, 60)]
    assert [text(r["position"]) for r in read_jsonl(tmp_path / "dlq")] == ["5", "60"]
    assert payload["records"]["dlq"] == 2


def test_default_dlq_stops_at_the_first_nack(run_yaml, tmp_path):
    yaml_text = PIPELINE.replace(
        "    dead-letter-queue:\n      plugin: builtin:file\n",
        "    dead-letter-queue:\n      plugin: builtin:log\n",
    )
    yaml_text = yaml_text.replace('      settings: {path: "{tmp}/dlq"}\n', "      settings: {}\n")
    payload = run_yaml(yaml_text % ("70", 1, 0))
    assert payload["exit_code"] == 1 and payload["error"]["code"] == "dlq_threshold_exceeded"
    assert "position 70" in payload["error"]["message"]
    assert len(read_jsonl(tmp_path / "out")) == 50  # batch 0 only


def test_window_is_carried_across_batches_and_runs(run_yaml, tmp_path):
    # 48 and 52 sit in different micro-batches but within one window of 10: the second crosses.
    payload = run_yaml(PIPELINE % ("48, 52", 10, 1))
    assert payload["exit_code"] == 1
    assert "position 52" in payload["error"]["message"]
    window = json.loads((tmp_path / "state" / "win" / "window.json").read_text())
    assert window["batch_id"] == 0 and sum(window["after"]["outcomes"]) == 1
