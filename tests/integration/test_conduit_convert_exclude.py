"""Conduit's field.convert to ``time`` and field.exclude of ``.Payload``, against the input -> output
pairs of Conduit's processor docs (``convert_examples_test.go``, ``exclude_examples_test.go``) and its
unit tests (``convert_test.go``), in a real pipeline."""

from __future__ import annotations

from tests.conftest import FILE_DLQ, read_jsonl, run_decoded, text


def test_convert_to_time_unix_nanos_and_rfc3339_and_nack(run_yaml, tmp_path):
    rows = [
        {"n": 0, "createdAt": 1704198896123456789},  # the docs' example: int -> time
        {"n": 1, "createdAt": "2021-01-21T18:40:12.345678999Z"},  # convert_test.go: string -> time
        {"n": 2, "createdAt": "2024-03-01T10:00:00.500+02:00"},  # an offset is kept, zeros cut
        {"n": 3, "createdAt": "21.01.2021 18:40:12"},  # convert_test.go: invalid format
        {"n": 4, "createdAt": "1611254412345678999"},  # text that is an integer: Unix nanoseconds
    ]
    payload = run_decoded(
        run_yaml,
        tmp_path,
        rows,
        "      - {id: conv, plugin: field.convert, settings: {field: .Payload.After.createdAt, type: time}}",
        FILE_DLQ,
    )
    assert payload["exit_code"] == 0, payload
    out = {
        r["payload"]["after"]["n"]: r["payload"]["after"]["createdAt"] for r in read_jsonl(tmp_path / "out")
    }
    assert out == {
        0: "2024-01-02T12:34:56.123456789Z",
        1: "2021-01-21T18:40:12.345678999Z",
        2: "2024-03-01T10:00:00.5+02:00",
        4: "2021-01-21T18:40:12.345678999Z",
    }
    [nacked] = read_jsonl(tmp_path / "dlq")
    assert nacked["metadata"]["conduit.dlq.nack.node.id"] == "p:conv"
    assert nacked["metadata"]["conduit.dlq.nack.error"].endswith(
        'parsing time "21.01.2021 18:40:12" as "2006-01-02T15:04:05.999999999Z07:00": cannot parse '
        '"21.01.2021 18:40:12" as "2006"'
    )


def test_exclude_payload_and_several_fields(run_yaml, tmp_path):
    rows = [{"foo": "bar", "foobar": "baz"}]
    payload = run_decoded(
        run_yaml,
        tmp_path,
        rows,
        """      - {id: meta, plugin: field.set, settings: {field: .Metadata.key1, value: val1}}
      - {id: before, plugin: field.set, settings: {field: .Payload.Before, value: '{"bar":"baz"}'}}
      - {id: decode-before, plugin: json.decode, settings: {field: .Payload.Before}}
      - {id: copy, plugin: field.set, settings: {field: .Metadata.copy, value: '{{ .Payload.After.foo }}'}}
      - {id: exclude, plugin: field.exclude, settings: {fields: .Payload}}""",
        FILE_DLQ,
    )
    assert payload["exit_code"] == 0, payload
    [record] = read_jsonl(tmp_path / "out")
    # exclude_examples_test.go: excluding .Payload leaves an empty payload (before and after nil)
    assert record["payload"] == {"before": None, "after": None}
    assert record["metadata"]["key1"] == "val1" and record["metadata"]["copy"] == "bar"
    assert record["operation"] == "create" and text(record["position"]).startswith("rows.jsonl")
