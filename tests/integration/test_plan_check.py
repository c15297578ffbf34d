"""The plan check before a run: every processor analysed by Spark on an empty batch, once, and the
answer the run needs again (what a batch must store) taken from that analysis."""

from __future__ import annotations

from collections import Counter
from typing import Any

from airflow_conduit.engine import processors
from airflow_conduit.errors import EXIT_CONFIG

PIPELINE = """
version: "2.2"
pipelines:
  - id: checked
    connectors:
      - {id: in, type: source, plugin: builtin:file, settings: {path: "{tmp}/in.jsonl"}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
    processors:
      - {id: decode, plugin: json.decode, settings: {field: .Payload.After}}
      - {id: tag, plugin: field.set, settings: {field: .Payload.After.env, value: prod}}
      - {id: py, plugin: custom.python, settings: {function: "plan_check_fn:same", path: "{tmp}"}}
"""


def _pipeline_files(tmp_path) -> None:
    (tmp_path / "in.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    (tmp_path / "plan_check_fn.py").write_text("def same(record):\n    return record\n")


def test_each_processor_is_analysed_once_for_the_check_and_the_run(run_yaml, tmp_path, monkeypatch):
    _pipeline_files(tmp_path)
    analysed: Counter[str] = Counter()
    planned = processors._apply_module

    def counted(records: Any, proc: Any, batch: Any) -> Any:
        if records.isEmpty():  # the empty batch of the check (the run's batches hold records)
            analysed[proc.id] += 1
        return planned(records, proc, batch)

    monkeypatch.setattr(processors, "_apply_module", counted)
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    assert analysed == {"decode": 1, "tag": 1, "py": 1}


def test_a_processor_spark_cannot_analyse_stops_the_run_before_it_starts(run_yaml, tmp_path, monkeypatch):
    """Refused as a config mistake (fatal), naming the processor and its line, before any batch."""
    _pipeline_files(tmp_path)
    planned = processors._apply_module

    def broken(records: Any, proc: Any, batch: Any) -> Any:
        if proc.id == "tag":  # a failure injected where Spark analyses the processor
            return records.selectExpr("no_such_column")
        return planned(records, proc, batch)

    monkeypatch.setattr(processors, "_apply_module", broken)
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == EXIT_CONFIG, payload
    assert payload["error"]["kind"] == "fatal"
    assert payload["error"]["code"] == "invalid_config"
    assert "processor checked:tag (field.set) is invalid" in payload["error"]["message"]
    assert "no_such_column" in payload["error"]["message"]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.jsonl"))
