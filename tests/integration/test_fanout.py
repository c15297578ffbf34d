"""``split`` and ``clone`` (one record in, several out) in real pipelines on the shared SparkSession:
Conduit's documented outputs, source order, one ack or nack per source record, and user code after
them called once per piece."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import read_jsonl

USERS = [
    {
        "batch": 0,
        "users": [{"name": "Alice", "age": 30}, {"name": "Bob", "age": 25}, {"name": "Charlie", "age": 35}],
    },
    {"batch": 1, "users": []},  # Conduit: a MultiRecord of none is filtered
    {"batch": 2, "users": "nobody"},  # not an array: nacked
    {"batch": 3, "users": [{"name": "Dana", "age": 41}]},
    {"batch": 4, "users": [{"name": "Eve", "age": 22}, {"name": "Finn", "age": 52}]},
]


def pipeline(tmp: Path, processors: str, window: str = "window-size: 0") -> str:
    source = tmp / "in"
    source.mkdir(exist_ok=True)
    (source / "users.jsonl").write_text("".join(json.dumps(u) + "\n" for u in USERS))
    return f"""
version: "2.2"
pipelines:
  - id: fan
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{source}"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{tmp}/out"}}}}
    processors:
      - {{id: decode, plugin: json.decode, settings: {{field: .Payload.After}}}}
{processors}
    dead-letter-queue: {{plugin: builtin:file, settings: {{path: "{tmp}/dlq"}}, {window}}}
"""


def test_split_makes_a_record_per_element_in_order_and_acks_each_source_record_once(run_yaml, tmp_path):
    payload = run_yaml(
        pipeline(tmp_path, "      - {id: split, plugin: split, settings: {field: .Payload.After.users}}")
    )
    assert payload["exit_code"] == 0, payload
    out = read_jsonl(tmp_path / "out")
    expected = [
        (u["batch"], i, user)
        for u in USERS
        if isinstance(u["users"], list)
        for i, user in enumerate(u["users"])
    ]
    assert [
        (r["payload"]["after"]["batch"], int(r["metadata"]["split.index"]), r["payload"]["after"]["users"])
        for r in out
    ] == expected
    [nacked] = read_jsonl(tmp_path / "dlq")
    assert nacked["payload"]["after"]["payload"]["after"]["batch"] == 2
    assert nacked["metadata"]["conduit.dlq.nack.error"] == 'field ".Payload.After.users" is not a slice'
    records = payload["records"]
    # Five source records: one filtered (empty), one nacked; six pieces written.
    assert (records["read"], records["acked"], records["nacked"]) == (5, 4, 1)
    assert records["written"] == {"fan:out": len(expected)}


def test_clone_then_split_orders_pieces_calls_user_code_once_each_and_nacks_a_record_once(run_yaml, tmp_path):
    calls = tmp_path / "calls"
    (tmp_path / "user_code.py").write_text(f"""
import random

def stamp(record):
    # Non-deterministic user code with a side effect: one line per call.
    with open({str(calls)!r}, "a") as f:
        f.write("x\\n")
    record["metadata"]["lucky"] = str(random.random())
    return record
""")
    processors = f"""      - {{id: clone, plugin: builtin:clone, settings: {{count: "1"}}}}
      - id: split
        plugin: split
        condition: '{{{{ ne .Payload.After.batch 2.0 }}}}'
        settings: {{field: .Payload.After.users}}
      - {{id: stamp, plugin: custom.python, settings: {{function: "user_code:stamp", path: "{tmp_path}"}}}}
      - id: refuse
        plugin: error
        condition: '{{{{ and (eq (index .Metadata "clone.index") "1") (eq .Payload.After.batch 4.0) }}}}'
        settings: {{message: 'refused {{{{ .Payload.After.users.name }}}}'}}"""
    payload = run_yaml(pipeline(tmp_path, processors))
    assert payload["exit_code"] == 0, payload
    expected = []
    for u in USERS:
        for clone in (0, 1):
            if u["batch"] == 2:
                expected.append((2, clone, None, "nobody"))
            elif u["batch"] == 4 and clone == 1:
                continue  # nacked
            else:
                expected += [(u["batch"], clone, i, user) for i, user in enumerate(u["users"])]
    out = read_jsonl(tmp_path / "out")
    got = [
        (
            r["payload"]["after"]["batch"],
            int(r["metadata"]["clone.index"]),
            int(r["metadata"]["split.index"]) if "split.index" in r["metadata"] else None,
            r["payload"]["after"]["users"],
        )
        for r in out
    ]
    assert got == expected
    # Every piece that reached the user's function was handed to it once: those written and the two
    # refused after it; their random values are the ones written.
    assert len(calls.read_text().splitlines()) == len(expected) + 2
    assert len({r["metadata"]["lucky"] for r in out}) == len(out)
    # Batch 4's second clone was refused in two pieces: one DLQ record for the source record, its first.
    [nacked] = read_jsonl(tmp_path / "dlq")
    assert nacked["metadata"]["conduit.dlq.nack.error"] == "refused Eve"
    records = payload["records"]
    assert (records["read"], records["acked"], records["nacked"], records["dlq"]) == (5, 4, 1, 1)
    # Batch 1 (no users) was filtered in both clones: one source record filtered, not two.
    assert records["filtered"] == 1
    assert records["written"] == {"fan:out": len(expected)}


def test_a_split_record_counts_once_in_the_nack_window(run_yaml, tmp_path):
    # Window of 3 records, threshold 1: one nacked source record is within it even though it became
    # three pieces that all fail; a second nacked record stops the pipeline.
    processors = """      - {id: split, plugin: split, settings: {field: .Payload.After.users}}
      - {id: refuse, plugin: error, condition: '{{ eq .Payload.After.batch 0.0 }}', settings: {message: no}}"""
    payload = run_yaml(pipeline(tmp_path, processors, "window-size: 3, window-nack-threshold: 1"))
    # Batch 0 (three pieces, nacked) and batch 2 (not an array, nacked) are two nacks in 3 records.
    assert payload["exit_code"] == 1, payload
    assert payload["error"]["code"] == "dlq_threshold_exceeded"
    assert "2/1 nacks in the last 3 records" in payload["error"]["message"], payload["error"]
