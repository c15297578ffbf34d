"""Reading the DLQ store back, summarising it, and replaying fixed records (pure Python)."""

from __future__ import annotations

import base64
import json

from airflow_conduit import dlq_tools
from airflow_conduit.dlq_tools import (
    added_ranges,
    read_dlq,
    read_dlq_event,
    replay,
    snapshot,
    summarize,
    unwrap_dlq_record,
)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def dlq_record(i: int, error: str = "amount is a multiple of 10", code: str | None = None) -> dict:
    failed = {
        "position": b64(str(i)),
        "operation": "create",
        "metadata": {"opencdc.collection": "orders"},
        "key": b64(str(i)),
        "payload": {"before": None, "after": {"id": i, "amount": i * 10}},
    }
    metadata = {
        "opencdc.collection": "orders",
        "conduit.dlq.nack.error": error,
        "conduit.dlq.nack.node.id": "orders:reject",
    }
    if code:
        metadata["conduit.dlq.nack.error.code"] = code
    return {
        "position": b64(str(i)),
        "operation": "create",
        "metadata": metadata,
        "key": b64(str(i)),
        "payload": {"before": None, "after": failed},
    }


def write(directory, name, records):
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / name).open("a") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def test_read_in_file_order_skipping_bookkeeping(tmp_path):
    write(tmp_path, "b.jsonl", [dlq_record(3)])
    write(tmp_path, "a.jsonl", [dlq_record(1), dlq_record(2)])
    write(tmp_path, "_tmp.jsonl", [dlq_record(9)])
    write(tmp_path, ".hidden.jsonl", [dlq_record(9)])
    (tmp_path / "torn.jsonl").write_text(json.dumps(dlq_record(4)) + '\n{"posit')
    entries = read_dlq(tmp_path)
    assert [e.record["payload"]["after"]["id"] for e in entries] == [1, 2, 3, 4]
    assert entries[0].error == "amount is a multiple of 10" and entries[0].node == "orders:reject"
    assert entries[0].file == "a.jsonl" and entries[1].line == 1


def test_snapshot_and_what_came_after(tmp_path):
    write(tmp_path, "a.jsonl", [dlq_record(1)])
    before = snapshot(tmp_path)
    write(tmp_path, "a.jsonl", [dlq_record(2)])
    write(tmp_path, "b.jsonl", [dlq_record(3)])
    assert [e.record["payload"]["after"]["id"] for e in read_dlq(tmp_path, since=before)] == [2, 3]
    ranges = added_ranges(tmp_path, before)
    assert ranges == {"a.jsonl": [1, 2], "b.jsonl": [0, 1]}
    event = {"path": str(tmp_path), "files": ranges}
    assert [e.record["payload"]["after"]["id"] for e in read_dlq_event(event)] == [2, 3]


def test_summarize_positions_codes_nodes(tmp_path):
    write(tmp_path, "a.jsonl", [dlq_record(1), dlq_record(2, error="other\nsecond line"), dlq_record(3)])
    summary = summarize(read_dlq(tmp_path))
    assert summary == {
        "records": 3,
        "first_position": "1",
        "last_position": "3",
        "error_codes": ["amount is a multiple of 10", "other"],
        "nodes": ["orders:reject"],
    }
    write(tmp_path, "b.jsonl", [dlq_record(4, code="bad_amount")])
    assert summarize(read_dlq(tmp_path, ranges={"b.jsonl": [0, 1]}))["error_codes"] == ["bad_amount"]
    assert summarize([])["records"] == 0


def test_replay_writes_fixed_records_atomically(tmp_path):
    dlq = tmp_path / "dlq"
    write(dlq, "a.jsonl", [dlq_record(1), dlq_record(2), dlq_record(3)])

    def fix(record):
        if record["payload"]["after"]["id"] == 2:
            return None
        record["payload"]["after"]["amount"] += 1
        return record

    inbox = tmp_path / "inbox"
    path, replayed, dropped = replay(read_dlq(dlq), inbox, fix=fix, name="replay-1.jsonl")
    assert (replayed, dropped) == (2, 1)
    assert path == inbox / "replay-1.jsonl"
    assert [p.name for p in inbox.iterdir()] == ["replay-1.jsonl"]  # no temp file left
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    # Each line is the DLQ record with the fixed failed record in .Payload.After, tagged with its entry.
    assert [r["payload"]["after"]["payload"]["after"]["amount"] for r in lines] == [11, 31]
    assert [r["metadata"][dlq_tools.REPLAY_ENTRY] for r in lines] == ["a.jsonl:0", "a.jsonl:2"]
    assert lines[0]["metadata"]["conduit.dlq.nack.error"] == "amount is a multiple of 10"
    assert replay([], inbox)[0] is None


def test_unwrap_dlq_record_restores_the_record():
    failed = {
        "position": b64("7"),
        "operation": "update",
        "metadata": {"opencdc.collection": "orders"},
        "key": {"id": 7},
        "payload": {"before": {"amount": 70}, "after": {"amount": 71}},
    }
    dlq_line = {
        "position": b64("7"),
        "operation": "create",
        "metadata": {"conduit.dlq.nack.error": "amount is a multiple of 10", dlq_tools.REPLAY_ENTRY: "a:0"},
        "key": None,
        "payload": {"before": None, "after": failed},
    }
    source_record = {
        "position": b"replay-1.jsonl:0",
        "operation": "create",
        "metadata": {"conduit.source.connector.id": "orders-replay:replayed"},
        "key": None,
        "payload": {"before": None, "after": json.dumps(dlq_line).encode()},
    }
    out = unwrap_dlq_record(source_record)
    assert out["position"] == b"replay-1.jsonl:0"
    assert out["operation"] == "update" and out["key"] == {"id": 7}
    assert out["payload"] == {"before": {"amount": 70}, "after": {"amount": 71}}
    assert out["metadata"]["opencdc.collection"] == "orders"
    assert out["metadata"][dlq_tools.REPLAY_OF] == "7"
