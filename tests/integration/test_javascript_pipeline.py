"""custom.javascript in a real pipeline on the shared SparkSession: a script read from ``script.path``
filters one record, throws for another (it goes to the DLQ with the error, the others are written),
and writes ``Math.random()`` into each record: non-deterministic user code is applied once per record,
so the value written and the value a later processor saw agree."""

from __future__ import annotations

import json

from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.engine.connectors.generator import GeneratorSpec
from tests.conftest import read_jsonl, text

SETTINGS = {"recordCount": 12, "maxRecordsPerBatch": 5, "seed": 3}
SPEC = GeneratorSpec.from_settings(GeneratorSettings.model_validate(SETTINGS))

SCRIPT = """\
function process(rec) {
  const n = parseInt(String.fromCharCode.apply(String, rec.Key), 10);
  if (n === 7) {
    return null;
  }
  if (n === 4) {
    throw new Error("no record 4 here");
  }
  rec.Metadata["rand"] = String(Math.random());
  rec.Payload.After.greeting = "hello, " + rec.Payload.After.name;
  return rec;
}
"""


def test_filter_nack_and_random_values_applied_once(run_yaml, tmp_path):
    (tmp_path / "greet.js").write_text(SCRIPT)
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {json.dumps(SETTINGS)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: js, plugin: custom.javascript, settings: {{script.path: greet.js}}}}
      - {{id: copy, plugin: field.set, settings: {{field: .Metadata.seen, value: '{{{{ index .Metadata "rand" }}}}'}}}}
    dead-letter-queue: {{plugin: builtin:file, settings: {{path: "{{tmp}}/dlq"}}, window-size: 0}}
""")
    assert payload["exit_code"] == 0, payload
    records = payload["records"]
    assert (records["read"], records["filtered"], records["nacked"], records["dlq"]) == (12, 1, 1, 1)
    assert records["written"] == {"p:out": 10}

    out = {int(text(r["key"])): r for r in read_jsonl(tmp_path / "out")}
    assert sorted(out) == [i for i in range(12) if i not in (4, 7)]
    for i, written in out.items():
        name = json.loads(SPEC.row(i)[7])["name"]
        assert written["payload"]["after"]["greeting"] == f"hello, {name}"
        assert written["metadata"]["seen"] == written["metadata"]["rand"]
    randoms = {float(r["metadata"]["rand"]) for r in out.values()}
    assert len(randoms) == 10 and all(0 <= value < 1 for value in randoms)

    [nacked] = read_jsonl(tmp_path / "dlq")
    assert int(text(nacked["payload"]["after"]["key"])) == 4
    error = nacked["metadata"]["conduit.dlq.nack.error"]
    assert error.startswith("Error: no record 4 here at process (script.js:7:"), error
    assert nacked["metadata"]["conduit.dlq.nack.node.id"] == "p:js"
