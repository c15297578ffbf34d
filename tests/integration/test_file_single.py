"""``builtin:file`` destination with Conduit's meaning: ``path`` names one JSON-lines file that the
batches are appended to, exactly once (the marker beside it holds the delivery hash and the committed
length; what lies beyond that length is cut before the next append)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.engine.connectors import jsonl_file
from tests.conftest import text

PIPELINE = """
version: "2.2"
pipelines:
  - id: one
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 30, maxRecordsPerBatch: 10}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/export/records.jsonl"}}
"""


def records_in(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().decode().splitlines()]


def keys(path: Path) -> list[int]:
    return [int(text(r["key"])) for r in records_in(path)]


def marker_of(path: Path) -> dict[str, Any]:
    return json.loads((path.parent / f".{path.name}.delivery.json").read_text())


def test_a_path_with_an_extension_is_one_file_appended_in_delivery_order(run_yaml, tmp_path):
    out = tmp_path / "export" / "records.jsonl"
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    assert out.is_file()
    assert keys(out) == list(range(30))
    # OpenCDC JSON, one record per line, as Conduit's destination writes with sdk.record.format's default
    assert all(set(r) == {"position", "operation", "metadata", "key", "payload"} for r in records_in(out))
    marker = marker_of(out)
    assert marker["length"] == out.stat().st_size and marker["hash"]
    # Nothing else is visible beside it: the marker and staging are hidden.
    assert [p.name for p in out.parent.iterdir() if not p.name.startswith(".")] == ["records.jsonl"]
    assert payload["records"]["written"] == {"one:out": 30}

    payload = run_yaml(PIPELINE.replace("recordCount: 30", "recordCount: 45"))
    assert payload["exit_code"] == 0, payload
    assert keys(out) == list(range(45))  # appended after the first run's records
    assert marker_of(out)["length"] == out.stat().st_size


def test_a_crash_between_the_append_and_the_marker_is_undone_on_restart(run_yaml, tmp_path, monkeypatch):
    out = tmp_path / "export" / "records.jsonl"
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    committed = marker_of(out)

    def crash(target: Path, marker: dict[str, Any]) -> None:  # the lines are appended and fsynced
        raise OSError("killed before the marker was written")

    monkeypatch.setattr(jsonl_file, "commit_marker", crash)
    more = PIPELINE.replace("recordCount: 30", "recordCount: 50")
    payload = run_yaml(more)
    assert payload["exit_code"] != 0, payload
    # The batch's lines are in the file, beyond the committed length the marker still holds.
    assert marker_of(out) == committed
    assert out.stat().st_size > committed["length"]
    assert keys(out) == list(range(40))

    monkeypatch.undo()
    payload = run_yaml(more)  # the restart replays the batch: the uncommitted lines are cut first
    assert payload["exit_code"] == 0, payload
    assert keys(out) == list(range(50))  # every record exactly once
    assert marker_of(out)["length"] == out.stat().st_size


def test_a_torn_tail_beyond_the_committed_length_is_cut(run_yaml, tmp_path):
    out = tmp_path / "export" / "records.jsonl"
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    with open(out, "ab") as fh:
        fh.write(b'{"position":"half a li')  # a write torn by a crash
    payload = run_yaml(PIPELINE.replace("recordCount: 30", "recordCount: 40"))
    assert payload["exit_code"] == 0, payload
    assert keys(out) == list(range(40))  # the half line is gone, every record once


def test_a_replayed_batch_that_the_file_holds_is_skipped(run_yaml, tmp_path):
    out = tmp_path / "export" / "records.jsonl"
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    # Forget that Spark committed the last batch: the restart replays it with the same offsets.
    commits = tmp_path / "state" / "one" / "checkpoint" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    assert keys(out) == list(range(30))
    events = [
        json.loads(line) for line in (tmp_path / "state" / "one" / "audit.jsonl").read_text().splitlines()
    ]
    assert [e["batch"] for e in events if e.get("event") == "delivery_skipped"] == [last]


@pytest.mark.parametrize(
    ("path", "expected"),
    [("out", "directory"), ("out/", "directory"), ("out.jsonl", "file"), ("file-destination.txt", "file")],
)
def test_which_layout_a_path_that_does_not_exist_gets(tmp_path, path, expected):
    assert jsonl_file.layout(f"{tmp_path}/{path}") == expected


def test_an_existing_path_keeps_its_kind(tmp_path):
    (tmp_path / "dir.jsonl").mkdir()
    (tmp_path / "plain").write_text("")
    assert jsonl_file.layout(str(tmp_path / "dir.jsonl")) == "directory"
    assert jsonl_file.layout(str(tmp_path / "plain")) == "file"
