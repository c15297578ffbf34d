"""Each builtin processor, and custom.python, run in real pipelines on the shared SparkSession.

Expected values are derived from the inputs: generated records from :class:`GeneratorSpec` (the
generator's own pure record function, the same settings as the pipeline), file records from the lines
written. Nacks are checked in the DLQ (``builtin:file``, ``window-size: 0``: every nack is delivered).
"""

from __future__ import annotations

import base64
import json
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.engine.connectors.generator import GeneratorSpec
from airflow_conduit.engine.processors.custom_python import load_function
from tests.conftest import ESCAPED_TEXT, FILE_DLQ, read_jsonl, run_decoded, text

DLQ = FILE_DLQ


def spec_of(settings: dict[str, Any]) -> GeneratorSpec:
    """The generator's record function for these settings, validated as the engine validates them."""
    return GeneratorSpec.from_settings(GeneratorSettings.model_validate(settings))


def after_of(spec: GeneratorSpec, i: int) -> dict[str, Any] | None:
    after = spec.row(i)[7]
    return None if after is None else json.loads(after)


def before_of(spec: GeneratorSpec, i: int) -> dict[str, Any] | None:
    before = spec.row(i)[5]
    return None if before is None else json.loads(before)


def gen(settings: dict[str, Any]) -> str:
    """Settings as a YAML flow mapping (JSON is YAML)."""
    return json.dumps(settings)


def key_of(record: dict[str, Any]) -> int:
    return int(text(record["key"]))


def failed(dlq_record: dict[str, Any]) -> dict[str, Any]:
    """The nacked record inside a DLQ record (Conduit wraps it as ``.Payload.After``)."""
    return dlq_record["payload"]["after"]


def nack_error(dlq_record: dict[str, Any]) -> tuple[str, str]:
    meta = dlq_record["metadata"]
    return meta["conduit.dlq.nack.error"], meta["conduit.dlq.nack.node.id"]


def lines_with_offsets(lines: list[str]) -> tuple[str, list[int]]:
    """File content and the byte offset of each line."""
    offsets, at = [], 0
    for line in lines:
        offsets.append(at)
        at += len(line.encode()) + 1
    return "".join(f"{line}\n" for line in lines), offsets


# --- field.set -----------------------------------------------------------------------------------------


def test_field_set_metadata_nested_payload_operation_and_raw_data_nack(run_yaml, tmp_path):
    structured = {"recordCount": 6, "collections": "orders,refunds", "seed": 4}
    raw = {"recordCount": 2, "collections": "raw", "format.type": "raw"}
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(structured)}}}
      - {{id: rawgen, type: source, plugin: builtin:generator, settings: {gen(raw)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: env, plugin: field.set, settings: {{field: .Metadata.env, value: prod}}}}
      - {{id: nested, plugin: field.set, settings: {{field: .Payload.After.a.b, value: deep}}}}
      - id: op
        plugin: field.set
        condition: .Metadata["opencdc.collection"] = 'refunds'
        settings: {{field: .Operation, value: update}}
    {DLQ}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["read"] == 8
    assert payload["records"]["nacked"] == payload["records"]["dlq"] == 2
    assert payload["records"]["written"] == {"p:out": 6}

    spec = spec_of(structured)
    out = read_jsonl(tmp_path / "out")
    assert sorted(key_of(r) for r in out) == list(range(6))
    for record in out:
        i = key_of(record)
        assert record["metadata"]["conduit.source.connector.id"] == "p:gen"
        assert record["metadata"]["env"] == "prod"
        assert record["payload"]["after"] == {**after_of(spec, i), "a": {"b": "deep"}}
        collection = record["metadata"]["opencdc.collection"]
        assert collection == ("orders", "refunds")[i % 2]
        assert record["operation"] == ("update" if collection == "refunds" else spec.row(i)[1])

    # A nested field of raw data cannot be set: the record is nacked, naming the field and the processor.
    dlq = read_jsonl(tmp_path / "dlq")
    assert len(dlq) == 2
    for record in dlq:
        error, node = nack_error(record)
        assert ".Payload.After.a.b" in error and "raw" in error
        assert node == "p:nested"
        original = failed(record)
        assert original["metadata"]["conduit.source.connector.id"] == "p:rawgen"
        assert original["metadata"]["env"] == "prod"  # the processor before it did run
        assert isinstance(original["payload"]["after"], str)  # still raw (base64)
        assert original["operation"] == "create"  # processors after the nack did not run
    assert sorted(int(text(failed(r)["key"])) for r in dlq) == [0, 1]


# --- field.rename / field.exclude ----------------------------------------------------------------------


def test_field_rename_metadata_and_payload(run_yaml, tmp_path):
    settings = {"recordCount": 12, "collections": "orders", "operations": "create,delete", "seed": 2}
    spec = spec_of(settings)
    operations = {spec.row(i)[1] for i in range(12)}
    assert operations == {"create", "delete"}, "precondition: both kinds of record are generated"
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: tag, plugin: field.set, settings: {{field: '.Metadata["tag,v1"]', value: "yes"}}}}
      - id: rename
        plugin: field.rename
        settings:
          # A `,` inside ["..."] is part of the key, not a separator.
          mapping: .Metadata["opencdc.collection"]:table,.Payload.After.name:full_name,.Payload.After.nested.x:y,.Metadata["tag,v1"]:tag
""")
    assert payload["exit_code"] == 0, payload
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == list(range(12))
    for record in out:
        i = key_of(record)
        assert record["metadata"]["table"] == "orders"
        assert record["metadata"]["tag"] == "yes"
        assert "opencdc.collection" not in record["metadata"]
        assert "tag,v1" not in record["metadata"]
        assert record["operation"] == spec.row(i)[1]
        expected = after_of(spec, i)
        if expected is None:
            # A delete has no .Payload.After: renaming a field in it leaves it null.
            assert record["payload"]["after"] is None
            assert record["payload"]["before"] == before_of(spec, i)  # .Before is not renamed
        else:
            expected["full_name"] = expected.pop("name")
            # `.Payload.After.nested.x` does not exist: renaming it creates nothing.
            assert record["payload"]["after"] == expected


def test_field_exclude_metadata_payload_field_and_several_fields(run_yaml, tmp_path):
    settings = {
        "recordCount": 8,
        "collections": "users",
        "operations": "create,update",
        "format.options.id": "int",
        "format.options.name": "string",
        "format.options.secret": "string",
    }
    spec = spec_of(settings)
    assert any(spec.row(i)[1] == "update" for i in range(8)), "precondition: some records have .Before"
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
      - id: bare
        type: destination
        plugin: builtin:file
        settings: {{path: "{{tmp}}/bare"}}
        processors:
          - {{id: all-metadata, plugin: field.exclude, settings: {{fields: .Metadata}}}}
    processors:
      - {{id: one, plugin: field.exclude, settings: {{fields: '.Metadata["opencdc.readAt"]'}}}}
      - id: several
        plugin: field.exclude
        settings:
          fields: .Payload.After.secret, .Payload.Before, .Metadata["conduit.source.connector.id"], .Payload.After.no.such
""")
    assert payload["exit_code"] == 0, payload
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == list(range(8))
    for record in out:
        i = key_of(record)
        expected = after_of(spec, i)
        del expected["secret"]
        assert record["metadata"] == {"opencdc.collection": "users"}
        assert record["payload"] == {"before": None, "after": expected}
    # `.Metadata` itself: every key is removed.
    bare = read_jsonl(tmp_path / "bare")
    assert [key_of(r) for r in bare] == list(range(8))
    assert all(r["metadata"] == {} for r in bare)
    assert [r["payload"] for r in bare] == [r["payload"] for r in out]


# --- json.decode / field.convert / json.encode ---------------------------------------------------------


def test_json_decode_and_field_convert_with_nacks(run_yaml, tmp_path):
    lines = [
        '{"id": 1, "qty": "12", "note": "ok"}',
        '{"id": 2, "qty": "x7"}',
        "not json {",
        '{"id": 4, "qty": "-3", "tags": ["a", "b"]}',
    ]
    content, offsets = lines_with_offsets(lines)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "orders.jsonl").write_text(content)
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: src, type: source, plugin: builtin:file, settings: {{path: "{{tmp}}/in"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: decode, plugin: json.decode, settings: {{field: .Payload.After}}}}
      - {{id: convert, plugin: field.convert, settings: {{field: .Payload.After.qty, type: int}}}}
    {DLQ}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["read"] == 4
    assert payload["records"]["nacked"] == payload["records"]["dlq"] == 2

    out = read_jsonl(tmp_path / "out")
    decoded = [json.loads(lines[i]) for i in (0, 3)]
    for doc in decoded:
        doc["qty"] = int(doc["qty"])
    assert [r["payload"]["after"] for r in out] == decoded
    assert [text(r["position"]) for r in out] == [f"orders.jsonl:{offsets[i]}" for i in (0, 3)]

    dlq = read_jsonl(tmp_path / "dlq")
    assert [text(r["position"]) for r in dlq] == [f"orders.jsonl:{offsets[i]}" for i in (1, 2)]
    convert_error, convert_node = nack_error(dlq[0])
    assert convert_node == "p:convert"
    assert ".Payload.After.qty" in convert_error and "int" in convert_error
    assert failed(dlq[0])["payload"]["after"] == json.loads(lines[1])  # decoded, not converted
    decode_error, decode_node = nack_error(dlq[1])
    assert decode_node == "p:decode"
    assert "not valid JSON" in decode_error
    assert text(failed(dlq[1])["payload"]["after"]) == lines[2]  # still the raw line


def test_json_encode_structured_payload_to_raw_json(run_yaml, tmp_path):
    settings = {"recordCount": 5, "format.options.id": "int", "format.options.ok": "bool", "seed": 9}
    spec = spec_of(settings)
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: encode, plugin: json.encode, settings: {{field: .Payload.After}}}}
""")
    assert payload["exit_code"] == 0, payload
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == list(range(5))
    for record in out:
        raw = record["payload"]["after"]
        assert isinstance(raw, str)  # raw data is base64 in OpenCDC JSON
        assert json.loads(base64.b64decode(raw)) == after_of(spec, key_of(record))


# --- filter / error, with conditions --------------------------------------------------------------------


def test_filter_and_error_with_metadata_and_payload_conditions(run_yaml, tmp_path):
    settings = {"recordCount": 30, "collections": "a,b,c", "maxRecordsPerBatch": 10, "seed": 5}
    spec = spec_of(settings)
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - id: drop-b
        plugin: filter
        condition: .Metadata["opencdc.collection"] = 'b'
      - id: odd
        plugin: error
        condition: CAST(.Payload.After.id AS BIGINT) % 2 = 1
        settings: {{message: odd id}}
    {DLQ}
""")
    assert payload["exit_code"] == 0, payload
    filtered = [i for i in range(30) if i % 3 == 1]
    odd = [i for i in range(30) if i % 3 != 1 and after_of(spec, i)["id"] % 2 == 1]
    kept = [i for i in range(30) if i not in filtered and i not in odd]
    assert odd and kept, "precondition: the seed yields both odd and even ids"
    assert payload["records"] == {
        "read": 30,
        "acked": 30 - len(odd),  # a filtered record counts as acked
        "filtered": len(filtered),
        "nacked": len(odd),
        "dlq": len(odd),
        "written": {"p:out": len(kept)},
    }
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == kept
    dlq = read_jsonl(tmp_path / "dlq")
    assert [int(text(failed(r)["key"])) for r in dlq] == odd
    assert {nack_error(r) for r in dlq} == {("odd id", "p:odd")}


# --- custom.python ---------------------------------------------------------------------------------------


def write_module(directory: Path, name: str, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(source)
    return directory


def decode_then_python(
    run_yaml: Any, tmp_path: Path, function: str, module_dir: Path, lines: list[Any], dlq: str = ""
) -> dict[str, Any]:
    """``lines`` through ``json.decode`` and ``custom.python`` ``function`` (:func:`run_decoded`)."""
    python = f'      - {{id: py, plugin: custom.python, settings: {{function: "{function}", path: "{module_dir}"}}}}'
    return run_decoded(run_yaml, tmp_path, lines, python, dlq)


UDF_TRANSFORM = """
def transform(record):
    i = int(record["key"])  # raw data arrives as bytes
    after = record["payload"]["after"]
    if i % 3 == 0:
        return None
    if i % 3 == 1:
        raise ValueError(f"record {i} is no good")
    after["name"] = after["name"].upper()
    record["metadata"]["types"] = f"{type(record['key']).__name__},{type(after).__name__}"
    return record
"""


def test_custom_python_transform_filter_and_nack(run_yaml, tmp_path):
    module_dir = write_module(tmp_path / "udf", "udf_transform", UDF_TRANSFORM)
    settings = {"recordCount": 12, "collections": "orders,other", "seed": 1}
    spec = spec_of(settings)
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - id: py
        plugin: custom.python
        condition: .Metadata["opencdc.collection"] = 'orders'
        settings: {{function: "udf_transform:transform", path: "{module_dir}"}}
    {DLQ}
""")
    assert payload["exit_code"] == 0, payload
    active = [i for i in range(12) if i % 2 == 0]  # the condition: collection orders
    dropped = [i for i in active if i % 3 == 0]
    bad = [i for i in active if i % 3 == 1]
    assert payload["records"]["filtered"] == len(dropped)
    assert payload["records"]["nacked"] == payload["records"]["dlq"] == len(bad)

    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == [i for i in range(12) if i not in dropped and i not in bad]
    for record in out:
        i = key_of(record)
        expected = after_of(spec, i)
        if i in active:
            expected["name"] = expected["name"].upper()
            assert record["metadata"]["types"] == "bytes,dict"
        else:
            assert "types" not in record["metadata"]  # the condition was false: untouched
        assert record["payload"]["after"] == expected

    dlq = read_jsonl(tmp_path / "dlq")
    assert [int(text(failed(r)["key"])) for r in dlq] == bad
    assert [nack_error(r) for r in dlq] == [(f"ValueError: record {i} is no good", "p:py") for i in bad]


UDF_TAG = """
def tag(record):
    record["payload"]["after"]["seen"] = True
    return record
"""


def test_custom_python_keeps_numbers_exact(run_yaml, tmp_path):
    """Integers past 64 bits (which orjson would read as floats) and at the edge of it come back exact."""
    module_dir = write_module(tmp_path / "udf", "udf_tag", UDF_TAG)
    lines = [
        {"n": 123456789012345678901234567890, "s": "é\u2603", "nested": {"a": [1, 2.5, None]}},
        {"n": 9223372036854775807, "m": -9223372036854775808, "f": 0.1},
        {"n": 18446744073709551616, "text": "1234567890123456789012345"},
    ]
    payload = decode_then_python(run_yaml, tmp_path, "udf_tag:tag", module_dir, lines, DLQ)
    assert payload["exit_code"] == 0, payload
    assert [r["payload"]["after"] for r in read_jsonl(tmp_path / "out")] == [
        {**line, "seen": True} for line in lines
    ]


def test_custom_python_path_is_shipped_to_the_executors(spark, run_yaml, tmp_path):
    """On a cluster a processor's ``path`` may exist on the driver's machine only: its Python files are
    zipped into the state dir and added to every Python worker's import path, so executors import the
    module even where the directory is missing."""
    name = f"udf_shipped_{uuid.uuid4().hex[:8]}"  # a name no Python worker has imported yet
    module_dir = write_module(tmp_path / "udf", name, UDF_TAG)
    write_module(module_dir, f"{name}_label", f"LABEL = {name!r}\n")  # imported by no task before the end
    (module_dir / "__pycache__").mkdir()
    (module_dir / "__pycache__" / "stale.py").write_text("raise SystemExit")
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen({"recordCount": 3})}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: py, plugin: custom.python, settings: {{function: "{name}:tag", path: "{module_dir}"}}}}
    {DLQ}
""")
    assert payload["exit_code"] == 0, payload
    assert [r["payload"]["after"]["seen"] for r in read_jsonl(tmp_path / "out")] == [True] * 3
    [archive] = (tmp_path / "state" / "p" / "python").glob("udf-*.zip")
    assert sorted(zipfile.ZipFile(archive).namelist()) == [f"{name}.py", f"{name}_label.py"]

    # The directory gone, a task finds the module in the zip alone.
    module_dir.rename(tmp_path / "elsewhere")

    def label(batches):
        value = load_function(f"{name}_label:LABEL", str(module_dir))
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"label": [value] * batch.num_rows})

    assert spark.range(2).mapInArrow(label, "label string").collect() == [(name,), (name,)]


UDF_TRANSIENT = """
import os
from airflow_conduit.errors import TransientError

FLAG = {flag!r}

def call(record):
    if int(record["key"]) == 6 and os.path.exists(FLAG):
        raise TransientError("the lookup service is down")
    return record
"""


def test_custom_python_transient_error_stops_and_restart_retries(run_yaml, tmp_path):
    flag = tmp_path / "service-down"
    flag.touch()
    module_dir = write_module(tmp_path / "udf", "udf_transient", UDF_TRANSIENT.format(flag=str(flag)))
    settings = {"recordCount": 10, "maxRecordsPerBatch": 4}
    pipeline = f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: py, plugin: custom.python, settings: {{function: "udf_transient:call", path: "{module_dir}"}}}}
    {DLQ}
"""
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 75, payload
    assert payload["status"] == "failed"
    error = payload["error"]
    assert error["kind"] == "transient"
    assert error["node"] == "p:py"
    assert "the lookup service is down" in error["message"]
    assert payload["records"]["nacked"] == 0  # not nacked: nothing in the DLQ
    assert not list((tmp_path / "dlq").glob("*.jsonl"))
    # The batch before it was delivered; nothing of the failing batch (records 4-7) was.
    assert [key_of(r) for r in read_jsonl(tmp_path / "out")] == [0, 1, 2, 3]

    flag.unlink()  # the service is back: a restart retries the record
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 0, payload
    assert [key_of(r) for r in read_jsonl(tmp_path / "out")] == list(range(10))


UDF_FATAL = """
from airflow_conduit.errors import FatalError

def call(record):
    if int(record["key"]) == 6:
        raise FatalError("schema violation, cannot continue")
    return record
"""


def test_custom_python_fatal_error_degrades_and_writes_nothing_of_the_batch(run_yaml, tmp_path):
    module_dir = write_module(tmp_path / "udf", "udf_fatal", UDF_FATAL)
    settings = {"recordCount": 10, "maxRecordsPerBatch": 4}
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: py, plugin: custom.python, settings: {{function: "udf_fatal:call", path: "{module_dir}"}}}}
    {DLQ}
""")
    assert payload["exit_code"] == 1, payload
    assert payload["status"] == "degraded"
    assert payload["error"]["kind"] == "fatal"
    assert payload["error"]["node"] == "p:py"
    assert "schema violation" in payload["error"]["message"]
    # Records 4 and 5 were fine but belong to the failing batch: none of it is written.
    assert [key_of(r) for r in read_jsonl(tmp_path / "out")] == [0, 1, 2, 3]
    assert payload["records"]["written"] == {"p:out": 4}
    assert not list((tmp_path / "out").glob("_tmp-*"))


# --- where processors attach -----------------------------------------------------------------------------


def test_source_and_destination_level_processors(run_yaml, tmp_path):
    first = {"recordCount": 6, "collections": "orders,refunds"}
    second = {"recordCount": 4, "collections": "orders,refunds", "seed": 7}
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - id: g1
        type: source
        plugin: builtin:generator
        settings: {gen(first)}
        processors:
          - {{id: tag-source, plugin: field.set, settings: {{field: .Metadata.stage, value: from-g1}}}}
      - id: g2
        type: source
        plugin: builtin:generator
        settings: {gen(second)}
        processors:
          - id: tag-orders
            plugin: field.set
            condition: .Metadata["opencdc.collection"] = 'orders'
            settings: {{field: .Metadata.g2, value: order}}
      - id: refunds-hidden
        type: destination
        plugin: builtin:file
        settings: {{path: "{{tmp}}/d1"}}
        processors:
          - {{id: tag-dest, plugin: field.set, settings: {{field: .Metadata.dest, value: d1}}}}
          - id: no-refunds
            plugin: filter
            condition: .Metadata["opencdc.collection"] = 'refunds'
      - {{id: everything, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/d2"}}}}
""")
    assert payload["exit_code"] == 0, payload

    def ids(records):
        return sorted((r["metadata"]["conduit.source.connector.id"], key_of(r)) for r in records)

    every = [("p:g1", i) for i in range(6)] + [("p:g2", i) for i in range(4)]
    d1, d2 = read_jsonl(tmp_path / "d1"), read_jsonl(tmp_path / "d2")
    assert ids(d2) == sorted(every)
    assert ids(d1) == sorted((s, i) for s, i in every if i % 2 == 0)  # collection orders
    assert payload["records"]["written"] == {"p:refunds-hidden": len(d1), "p:everything": len(d2)}
    for record in d1 + d2:
        # The source-level processor ran on g1's records only, before the fan-in.
        from_g1 = record["metadata"]["conduit.source.connector.id"] == "p:g1"
        assert record["metadata"].get("stage") == ("from-g1" if from_g1 else None)
        # g2's processor: its own records only, and of those the ones its condition picks.
        g2_order = not from_g1 and record["metadata"]["opencdc.collection"] == "orders"
        assert record["metadata"].get("g2") == ("order" if g2_order else None)
    # The destination-level processors changed only what that destination got.
    assert {r["metadata"].get("dest") for r in d1} == {"d1"}
    assert {r["metadata"].get("dest") for r in d2} == {None}


# --- plan size ---------------------------------------------------------------------------------------------


def _three_records(spark):
    """A batch as the engine sees it (not an empty relation, which the optimizer would fold away)."""
    from pyspark.sql import functions as F

    return (
        spark.range(3)
        .selectExpr(
            "cast(cast(id as string) as binary) AS position",
            "'create' AS operation",
            "map('k', cast(id as string)) AS metadata",
            "cast(NULL AS variant) AS key",
            "cast(cast(id as string) as binary) AS key_raw",
            "cast(NULL AS variant) AS before",
            "cast(NULL AS binary) AS before_raw",
            """parse_json('{"n": "' || id || '", "f": "1.5", "b": "true", "doc": "[1]"}') AS after""",
            "cast(NULL AS binary) AS after_raw",
            "0 AS _src",
            "'open' AS _state",
            "cast(NULL AS string) AS _error",
            "cast(NULL AS string) AS _node",
            "cast(array() AS array<int>) AS _piece",
        )
        .withColumn("_seq", F.monotonically_increasing_id())
    )


def _processors(tmp_path, processors_yaml: str):
    """The processors of a pipeline whose ``processors:`` list is ``processors_yaml``."""
    from airflow_conduit.config import load_pipeline_text

    loaded = load_pipeline_text(
        f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: src, type: source, plugin: builtin:file, settings: {{path: /nonexistent}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: /nonexistent-out}}}}
    processors:
{processors_yaml}""",
        str(tmp_path / "p.yaml"),
    )
    return loaded.pipelines[0].processors


def _chain(spark, tmp_path, processors_yaml: str):
    """The processors of :func:`_processors`, :func:`_three_records`, and the size of the optimized plan
    that reads the nacked records after the first ``count`` processors."""
    from airflow_conduit.engine.processors import apply_all

    processors = _processors(tmp_path, processors_yaml)
    batch = _three_records(spark)

    def plan_size(count: int) -> int:
        nacked = apply_all(batch, processors[:count]).filter("_state = 'nacked'").select("_seq", "_error")
        return len(nacked._jdf.queryExecution().optimizedPlan().toString())

    return processors, batch, plan_size


def test_processor_chain_plan_grows_linearly_under_state_filters(spark, tmp_path):
    """The engine filters on ``_state`` above the processors (open records per destination, nacked ones
    for the DLQ). Spark pushes such a filter through projections, inlining their expressions; each
    processor's columns name the previous ones several times, so without a barrier the plan grew several
    times per processor: eight processors that can nack ran the driver out of memory."""

    from airflow_conduit.engine.processors import apply_all

    processors, batch, plan_size = _chain(
        spark,
        tmp_path,
        """
      - {id: c1, plugin: field.convert, settings: {field: .Payload.After.n, type: int}}
      - {id: c2, plugin: field.convert, settings: {field: .Payload.After.f, type: float}}
      - {id: c3, plugin: field.convert, settings: {field: .Payload.After.b, type: bool}}
      - {id: d1, plugin: json.decode, settings: {field: .Payload.After.doc}}
      - {id: s1, plugin: field.set, settings: {field: .Payload.After.x, value: v}}
""",
    )

    one, five = plan_size(1), plan_size(5)
    assert five < 2 * 5 * one, (one, five)
    # And the chain computes what it should: every record passes every processor.
    rows = (
        apply_all(batch, processors).orderBy("_seq").selectExpr("_state", "to_json(after) AS after").collect()
    )
    assert [r._state for r in rows] == ["open"] * 3
    assert [json.loads(r.after) for r in rows] == [
        {"n": i, "f": 1.5, "b": True, "doc": [1], "x": "v"} for i in range(3)
    ]


def test_python_processor_chain_plan_grows_linearly(spark, tmp_path):
    """Processors that run Python per record, with conditions that run Python too: each mapper is a
    barrier to Spark's optimizer (as ``mapInArrow`` was), so the plan grows with the chain. Without it
    (a deterministic Arrow UDF) this chain kept the optimizer busy for minutes."""
    from airflow_conduit.engine.processors import apply_all

    processors, batch, plan_size = _chain(
        spark,
        tmp_path,
        """
      - {id: enc, plugin: base64.encode, settings: {field: .Payload.After.n}}
      - {id: copy, plugin: field.set, settings: {field: .Metadata.encoded, value: '{{ .Payload.After.n }}'}}
      - {id: dec, plugin: base64.decode, settings: {field: .Payload.After.n}}
      - {id: fill, plugin: field.set, condition: '{{ eq (toString .Position) "1" }}', settings: {field: .Metadata.b64, value: '!!'}}
      - {id: bad, plugin: base64.decode, condition: '{{ eq (toString .Position) "1" }}', settings: {field: .Metadata.b64}}
""",
    )

    # Measured 1,066, 2,810, 4,954, 7,050 and 11,428 characters for one to five processors.
    one, five = plan_size(1), plan_size(5)
    assert five < 3 * 5 * one, (one, five)
    rows = apply_all(batch, processors).orderBy("_seq").selectExpr("_state", "_node", "metadata").collect()
    assert [(r._state, r._node) for r in rows] == [("open", None), ("nacked", "p:bad"), ("open", None)]
    assert [r.metadata["encoded"] for r in rows] == ["MA==", "MQ==", "Mg=="]


def test_setting_a_field_is_what_the_object_as_a_map_with_the_field_concatenated_gives(spark):
    """``set_path`` calls the engine's ``conduit_variant_set``: for every kind of object (and of
    non-object, which counts as an empty one), key and value, the result must be what Spark's own
    ``to_variant_object(map_concat(...))`` gives, as JSON and as each field's type."""
    from airflow_conduit.engine.processors._expr import object_map
    from airflow_conduit.record import VARIANT_SET_FUNCTION

    objects = [
        '{"b": 1, "a": {"x": [1, null, "s"]}, "env": "old"}',
        json.dumps({ESCAPED_TEXT: ESCAPED_TEXT, "n": 1.5, "big": 12345678901234567890}),
        # Keys sorting all around the set ones (non-ASCII too), and sizes past one byte: over 255
        # fields, over 64 keys in the metadata (left to Spark's builder), long values.
        json.dumps({k: i for i, k in enumerate(["en", "enw", "a0", "é", "\uffff", "\U0001f600", "zz", "B"])}),
        json.dumps({f"k{i:03}": "v" * 300 for i in range(300)}),
        json.dumps({f"k{i}": {"inner": i} for i in range(40)}),
        "{}",
        "[1, 2]",
        '"text"',
        "null",
        None,
    ]
    keys = ["env", "a", "", ESCAPED_TEXT, "b", "é", "\U0001f600", "k150", "zzz"]
    values = [
        "cast('prod' AS variant)",
        'parse_json(\'{"nested": [true, {"deep": null}]}\')',
        "cast(NULL AS variant)",
        "parse_json('null')",
        "cast(timestamp'2024-02-29 23:59:58.5' AS variant)",
        "cast(cast(-3.10 AS decimal(5, 2)) AS variant)",
    ]
    frame = spark.createDataFrame([(o, k) for o in objects for k in keys], "o string, k string").selectExpr(
        "parse_json(o) AS o", "k"
    )
    columns = []
    for i, value in enumerate(values):
        fast = f"{VARIANT_SET_FUNCTION}(o, k, {value})"
        plain = f"to_variant_object(map_concat({object_map('o')}, map(k, {value})))"
        columns += [
            f"to_json({fast}) AS fast{i}",
            f"to_json({plain}) AS plain{i}",
            f"schema_of_variant({fast}) AS fast_type{i}",
            f"schema_of_variant({plain}) AS plain_type{i}",
        ]
    rows = frame.selectExpr(*columns).collect()
    assert len(rows) == len(objects) * len(keys)
    for row in rows:
        for i in range(len(values)):
            assert row[f"fast{i}"] == row[f"plain{i}"]
            assert row[f"fast_type{i}"] == row[f"plain_type{i}"]
    assert json.loads(rows[0].fast0) == {"a": {"x": [1, None, "s"]}, "b": 1, "env": "prod"}


UDF_IDENTITY = """
def identity(record):
    return record
"""


def test_custom_python_keeps_what_it_does_not_change_as_spark_held_it(spark, tmp_path):
    """A pass-through leaves every column of every row as it was: the record's place and state (a
    nacked row's error and node, a split record's pieces, negative and extreme numbers), and its fields
    to the byte (a decimal stays a decimal, not the double its JSON text would parse to), whatever the
    function saw. Spark keeps each row beside the mapper; only the mapper's output comes back."""
    from airflow_conduit.engine.processors import apply

    write_module(tmp_path / "udf", "udf_keep", UDF_IDENTITY)
    (proc,) = _processors(
        tmp_path,
        f"""
      - {{id: py, plugin: custom.python, settings: {{function: "udf_keep:identity", path: "{tmp_path / "udf"}"}}}}
""",
    )
    rows = spark.sql(
        """
        SELECT * FROM VALUES
          (X'663a31', 'create', map('file.path', 'f', 'ü', '日本 😀', 'none', CAST(NULL AS STRING)),
           parse_json('{"id": 1, "b": [1, 2.5, null, "x"]}'), CAST(NULL AS BINARY), CAST(NULL AS VARIANT),
           CAST(NULL AS BINARY), parse_json('{"d": 12.10, "f": 1e300}'), CAST(NULL AS BINARY),
           0, 7L, 'open', CAST(NULL AS STRING), CAST(NULL AS STRING), CAST(NULL AS ARRAY<INT>)),
          (X'', 'update', CAST(map() AS MAP<STRING, STRING>), CAST(NULL AS VARIANT), X'00ff',
           parse_json('{}'), CAST(NULL AS BINARY), CAST(NULL AS VARIANT), X'72617721',
           3, -9223372036854775808L, 'nacked', 'ValueError: "no"\n', 'p:earlier', array(0, 2, -1)),
          (X'663a33', 'delete', CAST(NULL AS MAP<STRING, STRING>), parse_json('[1e-7]'), CAST(NULL AS BINARY),
           parse_json('[]'), CAST(NULL AS BINARY), parse_json('{"s": {}}'), CAST(NULL AS BINARY),
           -1, 9223372036854775807L, 'open', '', '', array())
        AS t(position, operation, metadata, key, key_raw, before, before_raw, after, after_raw,
             _src, _seq, _state, _error, _node, _piece)
        """
    )
    as_text = [f"to_json({c}) AS {c}" if c in ("key", "before", "after") else c for c in rows.columns]
    types = [f"schema_of_variant({c}) AS {c}_type" for c in ("key", "before", "after")]
    mapped = apply(rows, proc)
    assert mapped.columns == rows.columns
    assert sorted(mapped.selectExpr(*as_text, *types).collect()) == sorted(
        rows.selectExpr(*as_text, *types).collect()
    )


UDF_FROZEN = """
import gc

def frozen(record):
    record["payload"]["after"]["frozen"] = gc.get_freeze_count() > 0
    return record
"""


def test_a_spark_python_worker_freezes_what_it_holds_before_its_first_batch(run_yaml, tmp_path):
    """Spark's worker runs a full collection after every task: the objects a worker holds when it maps
    its first batch (pyspark, pyarrow, the function's module) are frozen out of its reach."""
    module_dir = write_module(tmp_path / "udf", "udf_frozen", UDF_FROZEN)
    payload = decode_then_python(run_yaml, tmp_path, "udf_frozen:frozen", module_dir, [{"n": 1}, {"n": 2}])
    assert payload["exit_code"] == 0, payload
    rows = read_jsonl(tmp_path / "out")
    assert [(r["payload"]["after"]["n"], r["payload"]["after"]["frozen"]) for r in rows] == [
        (1, True),
        (2, True),
    ]


def test_custom_python_pass_through_changes_nothing(run_yaml, tmp_path):
    """A function that gives each record back as it got it leaves the output and the DLQ as they are
    without it: the fields it kept come back as Spark held them, not from their text,
    and the records an earlier processor nacked pass by it as they came."""
    module_dir = write_module(tmp_path / "udf", "udf_identity", UDF_IDENTITY)
    lines = [
        json.dumps({"id": 1, "s": 'é\u2603 "quoted" \\ \t', "nested": {"a": [1, 2.5, None, {}]}}),
        "not json",
        json.dumps({"id": 3, "f": 1e300, "d": 12.10, "big": 123456789012345678901234567890}),
        json.dumps([1, "two", None]),
        "{",
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "data.jsonl").write_text("".join(line + "\n" for line in lines))
    pipeline = """
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{{tmp}}/in"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out-{name}"}}}}
    processors:
      - {{id: decode, plugin: json.decode, settings: {{field: .Payload.After}}}}
      - {{id: meta, plugin: field.set, settings: {{field: '.Metadata["ü 日本"]', value: 'x"\\\\y'}}}}
{extra}
    dead-letter-queue: {{plugin: builtin:file, settings: {{path: "{{tmp}}/dlq-{name}"}}, window-size: 0}}
"""
    identity = (
        f'      - {{id: py, plugin: custom.python, settings: {{function: "udf_identity:identity", '
        f'path: "{module_dir}"}}}}'
    )
    for name, extra in (("plain", ""), ("python", identity)):
        payload = run_yaml(pipeline.format(name=name, extra=extra), state_dir=tmp_path / f"state-{name}")
        assert payload["exit_code"] == 0, payload
        assert payload["records"]["nacked"] == 2, payload

    def without_read_at(value: Any) -> Any:  # the time each run read the line
        if isinstance(value, dict):
            return {k: without_read_at(v) for k, v in value.items() if k != "opencdc.readAt"}
        return value

    def records(path: Path) -> list[dict[str, Any]]:
        return sorted(map(without_read_at, read_jsonl(path)), key=lambda record: record["position"])

    plain = records(tmp_path / "out-plain")
    assert len(plain) == 3
    assert records(tmp_path / "out-python") == plain
    dlq = records(tmp_path / "dlq-plain")
    assert len(dlq) == 2
    assert records(tmp_path / "dlq-python") == dlq
