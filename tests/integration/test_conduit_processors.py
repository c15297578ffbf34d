"""Conduit's builtin processors written in Python (base64.encode, base64.decode), in real pipelines on the
shared SparkSession; expected values come from the generator's own record function."""

from __future__ import annotations

import base64
import json

from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.engine.connectors.generator import GeneratorSpec
from tests.conftest import read_jsonl, text

SETTINGS = {"recordCount": 12, "maxRecordsPerBatch": 5, "seed": 3}
SPEC = GeneratorSpec.from_settings(GeneratorSettings.model_validate(SETTINGS))
DLQ = 'dead-letter-queue: {plugin: builtin:file, settings: {path: "{tmp}/dlq"}, window-size: 0}'


def name_of(i: int) -> str:
    return json.loads(SPEC.row(i)[7])["name"]


def pipeline(processors: str) -> str:
    return f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {json.dumps(SETTINGS)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
{processors}
    {DLQ}
"""


def test_base64_encode_then_decode_and_invalid_base64_nacks(run_yaml, tmp_path):
    payload = run_yaml(
        pipeline("""
      - {id: enc, plugin: base64.encode, settings: {field: .Payload.After.name}}
      - {id: copy, plugin: field.set, settings: {field: .Metadata.encoded, value: '{{ .Payload.After.name }}'}}
      - {id: dec, plugin: 'builtin:base64.decode', settings: {field: .Payload.After.name}}
      - {id: fill, plugin: field.set, condition: '{{ eq (toString .Position) "4" }}', settings: {field: .Metadata.b64, value: '!!'}}
      - {id: bad, plugin: base64.decode, condition: '{{ eq (toString .Position) "4" }}', settings: {field: .Metadata.b64}}
""")
    )
    assert payload["exit_code"] == 0, payload
    out = {int(text(r["key"])): r for r in read_jsonl(tmp_path / "out")}
    assert sorted(out) == [i for i in range(12) if i != 4]
    for i, written in out.items():
        assert written["payload"]["after"]["name"] == name_of(i)
        assert written["metadata"]["encoded"] == base64.b64encode(name_of(i).encode()).decode()
    [nacked] = read_jsonl(tmp_path / "dlq")
    assert int(text(nacked["payload"]["after"]["key"])) == 4
    assert nacked["metadata"]["conduit.dlq.nack.error"].startswith("failed to decode the value: ")
    assert nacked["metadata"]["conduit.dlq.nack.node.id"] == "p:bad"
