"""Conduit's Go templates in real pipelines on the shared SparkSession: conditions (translated to Spark SQL
or evaluated per record), templated field.set values and error messages, and the records Go cannot
evaluate a template on, which Conduit nacks.

Expected values come from the Python template engine on the generator's own records (its pure record
function), so the Spark SQL translations are checked against Go's rules, not against a typed-in answer.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_conduit.config import load_pipeline_text
from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.engine.connectors.generator import GeneratorSpec
from airflow_conduit.engine.processors import is_pure
from airflow_conduit.gotemplate import Template
from airflow_conduit.gotemplate.opencdc import from_record_dict
from tests.conftest import read_jsonl, text

DLQ = 'dead-letter-queue: {plugin: builtin:file, settings: {path: "{tmp}/dlq"}, window-size: 0}'
SETTINGS = {"recordCount": 30, "collections": "a,b,c", "maxRecordsPerBatch": 10, "seed": 5}
SPEC = GeneratorSpec.from_settings(GeneratorSettings.model_validate(SETTINGS))


def go_record(i: int) -> Any:
    """The template's view of generated record ``i``, as the engine hands it to a template."""
    position, operation, metadata, key_json, key_raw, _bj, _br, after_json, after_raw = SPEC.row(i)
    return from_record_dict(
        {
            "position": position,
            "operation": operation,
            "metadata": metadata,
            "key": json.loads(key_json) if key_json else key_raw,
            "payload": {"before": None, "after": json.loads(after_json) if after_json else after_raw},
        }
    )


def holds(template: str, i: int) -> bool:
    return Template.parse(template).execute(go_record(i)) == "true"


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


def name_of(i: int) -> str:
    return json.loads(SPEC.row(i)[7])["name"]


def key_of(written: dict[str, Any]) -> int:
    return int(text(written["key"]))


def test_conditions_in_sql_and_per_record_mean_what_go_says(run_yaml, tmp_path):
    in_sql = '{{ eq (index .Metadata "opencdc.collection") "b" }}'
    per_record = '{{ hasSuffix "7" (toString .Payload.After.id) }}'
    payload = run_yaml(
        pipeline(f"""
      - id: drop-b
        plugin: filter
        condition: '{in_sql}'
      - id: tag-7
        plugin: field.set
        condition: '{per_record}'
        settings: {{field: .Payload.After.tag, value: 'seven-{{{{ .Payload.After.name | upper }}}}'}}
""")
    )
    assert payload["exit_code"] == 0, payload
    dropped = [i for i in range(30) if holds(in_sql, i)]
    tagged = [i for i in range(30) if i not in dropped and holds(per_record, i)]
    assert dropped and tagged and len(dropped) + len(tagged) < 30, "precondition: the seed splits the records"
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == [i for i in range(30) if i not in dropped]
    tags = {key_of(r): r["payload"]["after"].get("tag") for r in out}
    assert tags == {
        i: (f"seven-{name_of(i).upper()}" if i in tagged else None) for i in range(30) if i not in dropped
    }


def test_what_go_cannot_evaluate_is_nacked_with_its_error(run_yaml, tmp_path):
    payload = run_yaml(
        pipeline("""
      - id: compare
        plugin: filter
        condition: '{{ eq .Payload.After.id "x" }}'
""")
    )
    # Every record: an int compared with a string is an error in Go, so Conduit nacks each one.
    assert payload["records"]["nacked"] == 30 and payload["records"]["written"] == {"p:out": 0}, payload
    errors = {r["metadata"]["conduit.dlq.nack.error"] for r in read_jsonl(tmp_path / "dlq")}
    assert errors == {"failed evaluating condition: error calling eq: incompatible types for comparison"}


def test_a_condition_that_prints_no_bool_nacks_and_error_messages_are_templates(run_yaml, tmp_path):
    payload = run_yaml(
        pipeline("""
      - id: odd-names
        plugin: error
        condition: '{{ if eq (index .Metadata "opencdc.collection") "a" }}true{{ else }}no{{ end }}'
        settings: {message: 'bad {{ .Payload.After.name }} at {{ .Position }}'}
""")
    )
    assert payload["exit_code"] == 0, payload
    dlq = read_jsonl(tmp_path / "dlq")
    by_key = {int(text(r["payload"]["after"]["key"])): r["metadata"]["conduit.dlq.nack.error"] for r in dlq}
    parse_error = (
        "failed evaluating condition: error converting the condition go-template output to boolean, "
        'strconv.ParseBool: parsing "no": invalid syntax'
    )
    assert by_key == {i: (f"bad {name_of(i)} at {i}" if i % 3 == 0 else parse_error) for i in range(30)}


def test_random_template_values_differ_per_record_and_are_not_recomputed(spark, run_yaml, tmp_path):
    text_of_file = pipeline("""
      - id: stamp
        plugin: field.set
        settings: {field: .Metadata.stamp, value: '{{ uuidv4 }}'}
""")
    payload = run_yaml(text_of_file)
    assert payload["exit_code"] == 0, payload
    stamps = [r["metadata"]["stamp"] for r in read_jsonl(tmp_path / "out")]
    assert len(stamps) == 30 and len(set(stamps)) == 30 and all(len(s) == 36 for s in stamps)
    # Like user code, such a processor is not pure: a replayed batch reads its stored decisions.
    proc = load_pipeline_text(text_of_file.replace("{tmp}", str(tmp_path))).pipelines[0].processors[0]
    assert is_pure(proc, spark.createDataFrame([], "x int")) is False


def test_a_templated_operation_must_be_one_conduit_knows(run_yaml, tmp_path):
    template = '{{ if eq (index .Metadata "opencdc.collection") "a" }}update{{ else }}upsert{{ end }}'
    payload = run_yaml(
        pipeline(f"""
      - id: op
        plugin: field.set
        settings: {{field: .Operation, value: '{template}'}}
""")
    )
    assert payload["exit_code"] == 0, payload
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == [i for i in range(30) if i % 3 == 0]
    assert {r["operation"] for r in out} == {"update"}
    errors = {r["metadata"]["conduit.dlq.nack.error"] for r in read_jsonl(tmp_path / "dlq")}
    assert errors == {'invalid operation "upsert"'}
