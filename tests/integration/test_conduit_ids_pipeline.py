"""Conduit's id alphabet in a real pipeline: pipeline and connector ids with ':' (``orders:v2``,
``pg:source``) name the state dir, the Spark checkpoint, the DLQ and the delivery markers through
``state.path_segment``, while the exit payload, the status and the DLQ metadata keep the ids as written."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_conduit.state import PipelineState, list_pipelines, path_segment
from tests.conftest import read_jsonl

PIPELINE = """
version: "2.2"
pipelines:
  - id: "orders:v2"
    connectors:
      - {id: "pg:source", type: source, plugin: builtin:file, settings: {path: "{tmp}/in"}}
      - {id: "file:out", type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
    processors:
      - id: "decode:1"
        plugin: json.decode
        settings: {field: .Payload.After}
      - id: "refuse:bad"
        plugin: error
        condition: '{{ eq .Payload.After.kind "bad" }}'
        settings: {message: 'bad order {{ .Payload.After.n }}'}
    dead-letter-queue: {plugin: builtin:file, settings: {path: "{tmp}/dlq"}, window-size: 0}
"""


def write_lines(path: Path, numbers: range, bad: int) -> None:
    rows = [{"n": n, "kind": "bad" if n == bad else "ok"} for n in numbers]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_ids_with_colons_run_write_dlq_and_restart_from_the_checkpoint(run_yaml, tmp_path):
    state_dir = tmp_path / ".conduit"
    (tmp_path / "in").mkdir()
    write_lines(tmp_path / "in" / "a.jsonl", range(0, 4), bad=2)

    first = run_yaml(PIPELINE, state_dir=state_dir)
    assert first["exit_code"] == 0, first
    assert first["pipeline"] == "orders:v2"
    assert first["records"]["read"] == 4 and first["records"]["dlq"] == 1
    assert first["records"]["written"] == {"orders:v2:file:out": 3}
    assert sorted(r["payload"]["after"]["n"] for r in read_jsonl(tmp_path / "out")) == [0, 1, 3]
    [nacked] = read_jsonl(tmp_path / "dlq")
    assert nacked["metadata"]["conduit.dlq.nack.node.id"] == "orders:v2:refuse:bad"
    assert nacked["metadata"]["conduit.dlq.nack.error"] == "bad order 2"

    # The state dir is named by the one escape; status and listing give the id back as written.
    state = PipelineState.of(state_dir, "orders:v2")
    assert state.root == state_dir / "orders~v2" == state_dir / path_segment("orders:v2")
    assert (state.checkpoint_dir / "offsets").is_dir()
    assert json.loads(state.exit_file.read_text())["pipeline"] == "orders:v2"
    assert [p.pipeline_id for p in list_pipelines(state_dir)] == ["orders:v2"]
    assert (state.read_status() or {})["pipeline"] == "orders:v2"

    # The second run starts from the checkpoint: only the new file's records are read and delivered.
    write_lines(tmp_path / "in" / "b.jsonl", range(4, 7), bad=5)
    second = run_yaml(PIPELINE, state_dir=state_dir)
    assert second["exit_code"] == 0, second
    assert second["records"]["read"] == 3 and second["records"]["dlq"] == 1
    out = [r["payload"]["after"]["n"] for r in read_jsonl(tmp_path / "out")]
    assert sorted(out) == [0, 1, 3, 4, 6]
    assert [r["metadata"]["conduit.dlq.nack.error"] for r in read_jsonl(tmp_path / "dlq")] == [
        "bad order 2",
        "bad order 5",
    ]
