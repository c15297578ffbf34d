"""Misconfigured file connectors are said so, and classified right: a destination path that is neither
a directory nor a regular file (a device, a pipe) is fatal (a config mistake never looks transient, or
Airflow would retry it forever); a source path that does not exist is not an error, but the run says so."""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path

import pytest


def pipeline(source_path: str, destination_path: str) -> str:
    return f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: src, type: source, plugin: builtin:file, settings: {{path: "{source_path}"}}}}
      - {{id: dst, type: destination, plugin: builtin:file, settings: {{path: "{destination_path}"}}}}
"""


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_destination_path_that_is_neither_a_file_nor_a_directory_is_fatal(run_yaml, tmp_path, kind):
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n")
    if kind == "device":
        taken = Path("/dev/null")
    else:
        taken = tmp_path / "pipe"
        os.mkfifo(taken)  # an append would block forever: refused before anything opens it
    payload = run_yaml(pipeline(str(source), str(taken)))
    assert payload["exit_code"] == 1 and payload["status"] == "degraded", payload
    assert payload["error"]["kind"] == "fatal"
    assert f"{taken} exists and is neither a directory nor a regular file" in payload["error"]["message"]
    if kind == "fifo":
        assert not list(tmp_path.glob(".pipe*"))  # no marker, no staging beside it


def test_an_existing_regular_file_is_appended_to_as_in_conduit(run_yaml, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n")
    taken = tmp_path / "taken"  # no extension, but it exists as a file: Conduit appends to it
    taken.write_text("already here\n")
    payload = run_yaml(pipeline(str(source), str(taken)))
    assert payload["exit_code"] == 0, payload
    lines = taken.read_text().splitlines()
    assert lines[0] == "already here"
    assert [base64.b64decode(json.loads(line)["payload"]["after"]) for line in lines[1:]] == [b"one", b"two"]


def test_a_missing_source_path_is_said(run_yaml, tmp_path, caplog):
    missing = tmp_path / "nowhere"
    with caplog.at_level(logging.WARNING, logger="airflow_conduit.engine"):
        payload = run_yaml(pipeline(str(missing), str(tmp_path / "out")))
    assert payload["exit_code"] == 0 and payload["records"]["read"] == 0, payload
    assert f"source p:src: {missing} does not exist (yet): nothing to read until it does" in caplog.text
