"""Misconfigured file connectors are said so, and classified right: a destination path that is a file
is fatal (a config mistake never looks transient, or Airflow would retry it forever); a source path that
does not exist is not an error, but the run says so."""

from __future__ import annotations

import logging


def pipeline(source_path: str, destination_path: str) -> str:
    return f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: src, type: source, plugin: builtin:file, settings: {{path: "{source_path}"}}}}
      - {{id: dst, type: destination, plugin: builtin:file, settings: {{path: "{destination_path}"}}}}
"""


def test_a_destination_path_that_is_a_file_is_fatal(run_yaml, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n")
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    payload = run_yaml(pipeline(str(source), str(taken)))
    assert payload["exit_code"] == 1 and payload["status"] == "degraded", payload
    assert payload["error"]["kind"] == "fatal"
    assert f"{taken} exists and is not a directory" in payload["error"]["message"]
    assert taken.read_text() == "not a directory"


def test_a_missing_source_path_is_said(run_yaml, tmp_path, caplog):
    missing = tmp_path / "nowhere"
    with caplog.at_level(logging.WARNING, logger="airflow_conduit.engine"):
        payload = run_yaml(pipeline(str(missing), str(tmp_path / "out")))
    assert payload["exit_code"] == 0 and payload["records"]["read"] == 0, payload
    assert f"source p:src: {missing} does not exist (yet): nothing to read until it does" in caplog.text
