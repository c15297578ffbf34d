"""A template that reads the clock is decided once per record: every destination of a fan-out and the
DLQ see the one value computed for the record, never a second evaluation."""

from __future__ import annotations

import json

from tests.conftest import read_jsonl


def test_now_is_computed_once_per_record_across_destinations(run_yaml, tmp_path):
    (tmp_path / "in").mkdir()
    rows = [{"n": n} for n in range(6)]
    (tmp_path / "in" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    payload = run_yaml("""
version: "2.2"
pipelines:
  - id: clock
    connectors:
      - {id: src, type: source, plugin: builtin:file, settings: {path: "{tmp}/in"}}
      - {id: a, type: destination, plugin: builtin:file, settings: {path: "{tmp}/a"}}
      - {id: b, type: destination, plugin: builtin:file, settings: {path: "{tmp}/b"}}
    processors:
      - {id: decode, plugin: json.decode, settings: {field: .Payload.After}}
      - {id: stamp, plugin: field.set, settings: {field: .Metadata.stamp, value: '{{ (now).UnixNano }}'}}
      - id: odd
        plugin: error
        condition: '{{ eq (mod .Payload.After.n 2) 1 }}'
        settings: {message: 'odd {{ .Metadata.stamp }}'}
    dead-letter-queue: {plugin: builtin:file, settings: {path: "{tmp}/dlq"}, window-size: 0}
""")
    assert payload["exit_code"] == 0, payload
    a = {r["payload"]["after"]["n"]: r["metadata"]["stamp"] for r in read_jsonl(tmp_path / "a")}
    b = {r["payload"]["after"]["n"]: r["metadata"]["stamp"] for r in read_jsonl(tmp_path / "b")}
    # A DLQ record holds the failed record (as OpenCDC JSON) in its payload.
    dlq = {r["payload"]["after"]["payload"]["after"]["n"]: r for r in read_jsonl(tmp_path / "dlq")}
    assert a == b  # both destinations got the same stamp for each record
    assert sorted(a) == [0, 2, 4] and sorted(dlq) == [1, 3, 5]
    stamps = list(a.values())
    for nacked in dlq.values():
        # the error's message read the stamp the record carries, not a second `now`
        stamp = nacked["payload"]["after"]["metadata"]["stamp"]
        assert nacked["metadata"]["conduit.dlq.nack.error"] == f"odd {stamp}"
        stamps.append(stamp)
    assert len(set(stamps)) == 6  # one `now` per record
