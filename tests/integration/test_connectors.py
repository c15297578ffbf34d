"""The builtin connectors (generator, file, log), destination routing, fan-in and fan-out, and the
example pipelines, on the shared SparkSession."""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.config import PLUGINS, load_pipeline_file, load_pipeline_text
from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.engine.connectors.generator import GeneratorSpec
from airflow_conduit.engine.delivery import logged_batch
from airflow_conduit.state import PipelineState
from tests.conftest import ESCAPED_TEXT, REPO, read_jsonl, text


def spec_of(settings: dict[str, Any]) -> GeneratorSpec:
    return GeneratorSpec.from_settings(GeneratorSettings.model_validate(settings))


def gen(settings: dict[str, Any]) -> str:
    """Settings as a YAML flow mapping (JSON is YAML)."""
    return json.dumps(settings)


def key_of(record: dict[str, Any]) -> int:
    return int(text(record["key"]))


def lines_of(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(position, line)`` of each record of a file source, in delivery order."""
    return [(text(r["position"]), text(r["payload"]["after"])) for r in records]


def positioned(lines: list[bytes]) -> list[tuple[int, str]]:
    """``(byte offset, text)`` of each line of a file made of ``lines``, each followed by a newline."""
    offsets = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]
    return [(o, line.decode()) for o, line in zip(offsets, lines, strict=True)]


def file_pipeline(source_path: str) -> str:
    return f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: src, type: source, plugin: builtin:file, settings: {{path: "{source_path}"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
"""


# --- builtin:generator ---------------------------------------------------------------------------------


def test_generator_record_count_collections_operations_and_field_types(run_yaml, tmp_path):
    settings = {
        "recordCount": 30,
        "maxRecordsPerBatch": 10,
        "collections": "a,b,c",
        "operations": "create,update,delete",
        "format.options.n": "int",
        "format.options.s": "string",
        "format.options.ok": "bool",
        "format.options.at": "time",
        "format.options.wait": "duration",
        "seed": 11,
    }
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
""")
    # A finite recordCount ends an until-idle run, in micro-batches of at most maxRecordsPerBatch.
    assert payload["exit_code"] == 0, payload
    assert payload["batches"] == 3
    assert payload["records"]["read"] == 30
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == list(range(30))
    assert [text(r["position"]) for r in out] == [str(i) for i in range(30)]

    # Collections round-robin.
    assert [r["metadata"]["opencdc.collection"] for r in out] == ["a", "b", "c"] * 10
    # Only the configured operations, each with the payload parts it implies.
    assert {r["operation"] for r in out} == {"create", "update", "delete"}
    for record in out:
        before, after = record["payload"]["before"], record["payload"]["after"]
        op = record["operation"]
        assert (before is not None) == (op in ("update", "delete")), record
        assert (after is not None) == (op in ("create", "update")), record
        for data in (before, after):
            if data is None:
                continue
            assert set(data) == {"n", "s", "ok", "at", "wait"}
            assert isinstance(data["n"], int) and not isinstance(data["n"], bool)
            assert isinstance(data["s"], str) and data["s"]
            assert isinstance(data["ok"], bool)
            datetime.strptime(data["at"], "%Y-%m-%dT%H:%M:%SZ")  # an RFC 3339 time
            assert re.fullmatch(r"\d+s", data["wait"])  # a Go duration
    # Booleans of both values: the values vary from record to record.
    assert {r["payload"]["after"]["ok"] for r in out if r["payload"]["after"]} == {True, False}

    # What went through Spark is what the generator's record function says.
    spec = spec_of(settings)
    for record in out:
        row = spec.row(key_of(record))
        assert record["operation"] == row[1]
        assert record["payload"]["before"] == (json.loads(row[5]) if row[5] else None)
        assert record["payload"]["after"] == (json.loads(row[7]) if row[7] else None)


def test_generator_raw_format_and_rate(run_yaml, tmp_path):
    settings = {
        "recordCount": 4,
        "rate": 40,  # paces the records; an until-idle run still gets all of them
        "format.type": "raw",
        "format.options.id": "int",
        "format.options.ok": "bool",
    }
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["read"] == 4
    out = read_jsonl(tmp_path / "out")
    assert [key_of(r) for r in out] == [0, 1, 2, 3]
    for record in out:
        raw = record["payload"]["after"]
        assert isinstance(raw, str)  # raw data: base64 in OpenCDC JSON, not an object
        document = json.loads(base64.b64decode(raw))
        assert set(document) == {"id", "ok"}
        assert isinstance(document["id"], int) and isinstance(document["ok"], bool)


def test_generator_collections_map_burst_and_sdk_batch_size(run_yaml, tmp_path):
    """Conduit's README examples "Collections" and "Bursts" together, with sdk.batch.size: each
    collection's records have its operations and format, and a micro-batch admits sdk.batch.size."""
    settings = {
        "recordCount": 300,
        "rate": 3000,
        "burst.generateTime": "50ms",
        "burst.sleepTime": "50ms",
        "sdk.batch.size": 100,
        "collections.users.format.type": "structured",
        "collections.users.format.options.id": "int",
        "collections.users.format.options.name": "string",
        "collections.users.operations": "create",
        "collections.orders.format.type": "raw",
        "collections.orders.format.options.id": "int",
        "collections.orders.format.options.product": "string",
        "collections.orders.operations": "create,update,delete",
    }
    began = time.monotonic()
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["read"] == 300
    assert payload["batches"] >= 3  # at most sdk.batch.size records each
    # 3000/s while generating, half of the time: 300 records take at least ~0.15 s.
    assert time.monotonic() - began >= 0.15
    out = read_jsonl(tmp_path / "out")
    assert sorted(key_of(r) for r in out) == list(range(300))
    by_collection: dict[str, list[dict[str, Any]]] = {}
    for record in out:
        by_collection.setdefault(record["metadata"]["opencdc.collection"], []).append(record)
    assert set(by_collection) == {"users", "orders"}
    assert all(100 <= len(records) <= 200 for records in by_collection.values())  # about half each
    assert {r["operation"] for r in by_collection["users"]} == {"create"}
    assert {r["operation"] for r in by_collection["orders"]} == {"create", "update", "delete"}
    for record in by_collection["users"]:
        assert set(record["payload"]["after"]) == {"id", "name"}  # structured
    for record in by_collection["orders"]:
        for raw in (record["payload"]["before"], record["payload"]["after"]):
            if raw is not None:
                assert set(json.loads(base64.b64decode(raw))) == {"id", "product"}  # raw JSON


def test_generator_format_file_payload_is_the_file(run_yaml, tmp_path):
    contents = '<order id="7">été</order>\n'.encode()
    (tmp_path / "order.xml").write_bytes(contents)
    settings = {
        "recordCount": 5,
        "format.type": "file",
        "format.options.path": str(tmp_path / "order.xml"),
        "operations": "snapshot",
    }
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
""")
    assert payload["exit_code"] == 0, payload
    out = read_jsonl(tmp_path / "out")
    assert len(out) == 5
    for record in out:
        assert record["operation"] == "snapshot"
        assert "opencdc.collection" not in record["metadata"]  # the default collection
        assert base64.b64decode(record["payload"]["after"]) == contents
        assert record["payload"]["before"] is None


# --- builtin:file source ---------------------------------------------------------------------------------


def test_file_source_directory_hidden_files_and_partial_last_line(run_yaml, tmp_path):
    source = tmp_path / "in"
    (source / "sub").mkdir(parents=True)
    a_lines, b_lines = [b"a1", b"a2"], [b"b1\r", b"b2", b"", b"b4"]  # CRLF and an empty line
    (source / "a.log").write_bytes(b"\n".join(a_lines) + b"\npart")  # the last line has no newline yet
    (source / "b.log").write_bytes(b"".join(line + b"\n" for line in b_lines))
    (source / "_staging.log").write_bytes(b"hidden1\n")
    (source / ".dotfile").write_bytes(b"hidden2\n")
    (source / "sub" / "c.log").write_bytes(b"in a subdirectory\n")

    payload = run_yaml(file_pipeline("{tmp}/in"))
    assert payload["exit_code"] == 0, payload
    # Files in name order, each line at its byte offset; a carriage return before the newline is dropped.
    first = [(f"a.log:{o}", line) for o, line in positioned(a_lines)]
    first += [(f"b.log:{o}", line.rstrip("\r")) for o, line in positioned(b_lines)]
    assert lines_of(read_jsonl(tmp_path / "out")) == first
    assert payload["records"]["read"] == len(first)

    # The rest of the line arrives: the next run (same state) reads it, once, and nothing else again.
    with open(source / "a.log", "ab") as fh:
        fh.write(b"ial\n")
    payload = run_yaml(file_pipeline("{tmp}/in"))
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["read"] == 1
    partial_at = sum(len(line) + 1 for line in a_lines)
    out = read_jsonl(tmp_path / "out")
    assert lines_of(out) == [*first, (f"a.log:{partial_at}", "partial")]
    # Keys are line numbers per file, going on across runs (the offset log holds the line counts).
    assert [text(r["key"]) for r in out] == ["1", "2", "1", "2", "3", "4", "3"]


def test_file_source_single_file(run_yaml, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    lines = [b"first", "second line, \u00fcnicode".encode(), b"x" * 300, b"last"]
    (source / "events.txt").write_bytes(b"".join(line + b"\n" for line in lines))
    (source / "other.txt").write_text("not this file\n")

    payload = run_yaml(file_pipeline("{tmp}/in/events.txt"))
    assert payload["exit_code"] == 0, payload
    out = read_jsonl(tmp_path / "out")
    assert lines_of(out) == [(f"events.txt:{o}", line) for o, line in positioned(lines)]
    assert {r["operation"] for r in out} == {"create"}
    assert {r["metadata"]["conduit.source.connector.id"] for r in out} == {"p:src"}
    # As Conduit's file source: the line number as raw key, the configured path as file.path.
    assert [text(r["key"]) for r in out] == [str(n) for n in range(1, len(lines) + 1)]
    assert {r["metadata"]["file.path"] for r in out} == {str(tmp_path / "in" / "events.txt")}


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_file_source_continuous_picks_up_appended_lines_and_new_files(spark, tmp_path):
    from airflow_conduit.engine.job import PipelineRun, RunOptions
    from airflow_conduit.state import PipelineState

    source = tmp_path / "in"
    source.mkdir()
    (source / "a.log").write_text("a1\na2\n")
    config = load_pipeline_text(
        file_pipeline("{tmp}/in").replace("{tmp}", str(tmp_path)), "<test>"
    ).pipelines[0]
    run = PipelineRun(
        spark,
        config,
        PipelineState.of(tmp_path / "state", "p"),
        RunOptions(until_idle=False, trigger_interval="200 milliseconds"),
    ).start()
    out = tmp_path / "out"
    try:
        assert wait_until(lambda: len(read_jsonl(out)) >= 2), read_jsonl(out)
        with open(source / "a.log", "a") as fh:
            fh.write("a3\nunfinish")  # a complete line and the start of another
        (source / "b.log").write_text("b1\nb2\n")
        expected = [
            ("a.log:0", "a1"),
            ("a.log:3", "a2"),
            ("a.log:6", "a3"),
            ("b.log:0", "b1"),
            ("b.log:3", "b2"),
        ]
        assert wait_until(lambda: len(read_jsonl(out)) >= len(expected)), read_jsonl(out)
    finally:
        run.request_stop()
        payload = run.wait()
    assert payload["exit_code"] == 0, payload
    assert payload["status"] == "stopped"
    # Each line exactly once; the unfinished line is not read.
    assert sorted(lines_of(read_jsonl(out))) == expected
    assert payload["records"]["read"] == len(expected)


# --- builtin:file destination ----------------------------------------------------------------------------


def test_file_destination_names_sort_in_delivery_order_and_opencdc_shape(run_yaml, tmp_path):
    settings = {
        "recordCount": 25,
        "maxRecordsPerBatch": 10,
        "operations": "create,update",
        "collections": "x",
    }
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen(settings)}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["batches"] == 3
    out_dir = tmp_path / "out"
    names = sorted(p.name for p in out_dir.iterdir())
    data_files = [n for n in names if n.endswith(".jsonl") and not n.startswith(("_", "."))]
    # Nothing left in progress; anything else is bookkeeping, named with a leading `_` or `.`.
    assert not [n for n in names if n.startswith("_tmp-")]
    assert all(n in data_files or n.startswith(("_", ".")) for n in names), names
    assert len(data_files) >= 3  # at least one file per micro-batch

    # Files in name order hold the records in delivery order.
    keys = []
    checkpoint = PipelineState(tmp_path / "state", "p").checkpoint_dir
    for name in data_files:
        records = [json.loads(line) for line in (out_dir / name).read_text().splitlines()]
        keys += [key_of(record) for record in records]
        # readAt is the micro-batch's time in Spark's offset log (the same on a replay of the batch).
        batch = int(name.split("-")[1])
        read_at = str(logged_batch(checkpoint, batch).timestamp_ms * 1_000_000)
        assert {r["metadata"]["opencdc.readAt"] for r in records} == {read_at}
    assert keys == list(range(25))

    spec = spec_of(settings)
    for record in read_jsonl(out_dir):
        assert set(record) == {"position", "operation", "metadata", "key", "payload"}
        assert set(record["payload"]) == {"before", "after"}
        i = key_of(record)
        row = spec.row(i)
        assert text(record["position"]) == str(i)
        assert record["operation"] == row[1]
        assert record["payload"]["after"] == json.loads(row[7])
        assert record["payload"]["before"] == (json.loads(row[5]) if row[5] else None)
        metadata = record["metadata"]
        assert metadata["opencdc.collection"] == "x"
        assert metadata["conduit.source.connector.id"] == "p:gen"
        assert int(metadata["opencdc.readAt"]) > 0


def test_opencdc_json_is_the_plain_to_json_of_the_record(spark):
    """The envelope appends each data field's JSON from the engine's own function: the text must be
    exactly what Spark's own ``to_json`` of the whole OpenCDC struct gives, for every mix of objects,
    other JSON values, raw data and nulls, and for heads with escapes, empty and missing parts."""
    from airflow_conduit.record import opencdc_json_sql, opencdc_struct_sql

    text_value = json.dumps({ESCAPED_TEXT: [ESCAPED_TEXT]})
    values = [
        '{"b": 1, "a": {"x": [1, null, "s"]}}',
        "[1, 2]",
        '"text"',
        "3.50",
        "null",
        "{}",
        text_value,
        None,
    ]
    heads = [
        ("cast('f:1' AS binary)", "'update'", "map('opencdc.collection', 'c\"q')"),
        ("X'00FF0A22'", "'odd \"op\"\\n'", "map(concat('k', char(1)), CAST(NULL AS string), 'v', 'x\\\\y')"),
        ("CAST(NULL AS binary)", "CAST(NULL AS string)", "CAST(NULL AS map<string,string>)"),
        ("X''", "''", "CAST(map() AS map<string,string>)"),
        # base64 of 2 bytes over a group of 3, and of more than 57 bytes (one line, not split at 76).
        ("X'0102030405'", "'delete'", "map('a', 'b')"),
        ("CAST(repeat('p', 100) AS binary)", "'snapshot'", "map('a', 'c')"),
        # Text that is not ASCII, and bytes that are not UTF-8 (to_json writes U+FFFD for them).
        ("X'01'", "'create'", "map('é 😀 <&>', CAST(X'C328FF41' AS string), CAST(X'E2FF' AS string), 'ü')"),
    ]
    rows = [
        (head, key, before, after, raw)
        for head in range(len(heads))
        for key in values[::2]
        for before in values[1::2]
        for after in values
        for raw in (None, b"r\x00w")
    ]
    schema = "head int, key string, before string, after string, raw binary"

    def by_head(part: int) -> str:
        return "CASE head " + " ".join(f"WHEN {i} THEN {h[part]}" for i, h in enumerate(heads)) + " END"

    frame = spark.createDataFrame(rows, schema).selectExpr(
        f"{by_head(0)} AS position",
        f"{by_head(1)} AS operation",
        f"{by_head(2)} AS metadata",
        "parse_json(key) AS key",
        "CAST(NULL AS binary) AS key_raw",
        "parse_json(before) AS before",
        "raw AS before_raw",
        "CASE WHEN raw IS NULL THEN parse_json(after) END AS after",
        "CASE WHEN raw IS NOT NULL THEN raw END AS after_raw",
    )
    checked = (
        frame.selectExpr(
            f"{opencdc_json_sql()} AS fast",
            f"to_json({opencdc_struct_sql()}, map('ignoreNullFields', 'false')) AS plain",
        )
        # Bytes that are not UTF-8 would read as U+FFFD in Python either way: compare the bytes.
        .selectExpr("*", "cast(fast AS binary) = cast(plain AS binary) AS same_bytes")
        .collect()
    )
    assert len(checked) == len(rows) > 100
    assert [r.fast for r in checked] == [r.plain for r in checked]
    assert all(r.same_bytes for r in checked)
    assert {json.loads(r.fast)["metadata"] is None for r in checked} == {True, False}
    sample = json.loads(checked[0].fast)
    assert sample["key"] == {"a": {"x": [1, None, "s"]}, "b": 1}
    assert set(sample) == {"position", "operation", "metadata", "key", "payload"}
    escapes = {"\\u0001", "\\n", '\\"', "\\\\", "\u2028"}
    assert any(all(e in r.fast for e in escapes) for r in checked)


def test_the_engines_variant_json_is_to_json_for_every_variant_type(spark):
    """``conduit_variant_json`` writes strings and keys itself and leaves other scalars to Spark: each
    kind of value, alone and nested, gives ``to_json``'s text (timestamps in the session's zone)."""
    from airflow_conduit.record import variant_json_sql

    scalars = [
        "1",
        "-9223372036854775808",
        "2.5",
        "1e300",
        "-0.0",
        "12345678901234567890.123",
        # Decimals of 4 and 8 bytes, written from their bytes: trailing zeros dropped, as Spark does.
        "[100.0, 0.00, -0.0010, 0.5, -12.340, 123456789.123456789, -999999999999999999.0, 10]",
        "[0.123456789012345678, -0.000000000000000001, -1.05, 0.001, 99.99, 7.0, -5.50, 1000000.0001]",
        "true",
        "false",
        "null",
        '""',
        json.dumps(ESCAPED_TEXT),
        json.dumps({ESCAPED_TEXT: ESCAPED_TEXT, "": []}),
        # Sizes past one byte: long strings and keys, objects and arrays of over 255 entries, field
        # ids and key offsets of two bytes (each has its own layout in the binary format).
        json.dumps(ESCAPED_TEXT * 5),
        json.dumps({f"key {i} é": [i, f"v{i}"] for i in range(300)}),
        json.dumps([{"x": i} for i in range(300)]),
        json.dumps({"k" * 300: {"nested": ["a" * 70, {"deep": [None, True, 1.5e-7]}]}}),
    ]
    casts = [
        "cast(cast('NaN' AS double) AS variant)",
        "cast(cast(1.25 AS float) AS variant)",
        "cast(cast(-3.10 AS decimal(5, 2)) AS variant)",
        "cast(date'2024-02-29' AS variant)",
        "cast(timestamp'2024-02-29 23:59:58.123456' AS variant)",
        "cast(timestamp_ntz'2024-02-29 23:59:58.5' AS variant)",
        "cast(X'00ff10' AS variant)",
        "cast(cast(7 AS tinyint) AS variant)",
    ]
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        parsed = spark.createDataFrame([(v,) for v in scalars], "j string").selectExpr("parse_json(j) AS v")
        cast = spark.range(1).selectExpr(f"explode(array({', '.join(casts)})) AS v")
        values = parsed.unionAll(cast)
        nested = values.selectExpr("to_variant_object(named_struct('k', v, 'a', array(v, v))) AS v")
        rows = (
            values.unionAll(nested)
            .selectExpr(f"{variant_json_sql('v')} AS fast", "to_json(v) AS plain")
            .collect()
        )
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
    assert len(rows) == 2 * (len(scalars) + len(casts))
    assert [r.fast for r in rows] == [r.plain for r in rows]
    assert '"2024-02-29 23:59:58.123456-08:00"' in {r.fast for r in rows}


def test_file_destination_long_raw_values_are_unbroken_base64(run_yaml, tmp_path):
    fields = {f"format.options.field_{n}": "string" for n in range(6)}
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {gen({"recordCount": 3, "format.type": "raw", **fields})}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
""")
    assert payload["exit_code"] == 0, payload
    for record in read_jsonl(tmp_path / "out"):
        raw = record["payload"]["after"]
        document = json.loads(base64.b64decode(raw))
        assert len(json.dumps(document)) > 57  # precondition: longer than one 76-character base64 line
        assert re.fullmatch(r"[A-Za-z0-9+/]+=*", raw), raw
        assert json.loads(base64.b64decode(raw, validate=True)) == document


# --- builtin:log destination -----------------------------------------------------------------------------


def test_log_destination_one_line_per_record_at_its_level(run_yaml, caplog):
    caplog.set_level(logging.DEBUG, logger="airflow_conduit.destination.log")
    payload = run_yaml("""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 5, maxRecordsPerBatch: 2}}
      - {id: loud, type: destination, plugin: builtin:log, settings: {level: error}}
      - {id: quiet, type: destination, plugin: builtin:log, settings: {level: debug, message: audit}}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["written"] == {"p:loud": 5, "p:quiet": 5}
    logged = [r for r in caplog.records if r.name == "airflow_conduit.destination.log"]
    for prefix, level in (("p:loud: ", logging.ERROR), ("audit: ", logging.DEBUG)):
        lines = [r for r in logged if r.getMessage().startswith(prefix)]
        assert [r.levelno for r in lines] == [level] * 5
        records = [json.loads(r.getMessage()[len(prefix) :]) for r in lines]
        assert [key_of(r) for r in records] == list(range(5))
        assert all(set(r) == {"position", "operation", "metadata", "key", "payload"} for r in records)
    assert len(logged) == 10


# --- routing, fan-in, fan-out ----------------------------------------------------------------------------


def test_namespace_routing(run_yaml, tmp_path):
    payload = run_yaml("""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings: {recordCount: 12, collections: "orders,refunds,users"}
      - {id: orders, type: destination, plugin: builtin:file, settings: {path: "{tmp}/orders", namespace: "^orders$"}}
      - {id: money, type: destination, plugin: builtin:file, settings: {path: "{tmp}/money", namespace: "^(refund|payment)s?$"}}
""")
    assert payload["exit_code"] == 0, payload
    orders, money = read_jsonl(tmp_path / "orders"), read_jsonl(tmp_path / "money")
    assert [key_of(r) for r in orders] == [i for i in range(12) if i % 3 == 0]
    assert [key_of(r) for r in money] == [i for i in range(12) if i % 3 == 1]
    assert {r["metadata"]["opencdc.collection"] for r in orders} == {"orders"}
    assert {r["metadata"]["opencdc.collection"] for r in money} == {"refunds"}
    # `users` matches neither destination: not written, yet acked (not nacked, not in the DLQ).
    assert payload["records"]["read"] == payload["records"]["acked"] == 12
    assert payload["records"]["nacked"] == payload["records"]["dlq"] == 0
    assert payload["records"]["written"] == {"p:orders": 4, "p:money": 4}


def test_fan_in_keeps_per_source_order(run_yaml, tmp_path):
    payload = run_yaml("""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {id: first, type: source, plugin: builtin:generator, settings: {recordCount: 20, maxRecordsPerBatch: 6}}
      - {id: second, type: source, plugin: builtin:generator, settings: {recordCount: 15, maxRecordsPerBatch: 4, seed: 3}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["read"] == 35
    out = read_jsonl(tmp_path / "out")
    sources = [r["metadata"]["conduit.source.connector.id"] for r in out]
    assert sorted(set(sources)) == ["p:first", "p:second"]
    for source, count in (("p:first", 20), ("p:second", 15)):
        assert [key_of(r) for r, s in zip(out, sources, strict=True) if s == source] == list(range(count))
    # The two generators differ (another seed), so the records are told apart by more than metadata.
    first_names = {
        key_of(r): r["payload"]["after"]["name"] for r, s in zip(out, sources, strict=True) if s == "p:first"
    }
    second_names = {
        key_of(r): r["payload"]["after"]["name"] for r, s in zip(out, sources, strict=True) if s == "p:second"
    }
    assert any(first_names[i] != second_names[i] for i in range(15))


def test_fan_out_every_destination_gets_every_record(run_yaml, tmp_path):
    payload = run_yaml("""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 10, maxRecordsPerBatch: 4, collections: "a,b"}}
      - {id: one, type: destination, plugin: builtin:file, settings: {path: "{tmp}/one"}}
      - {id: two, type: destination, plugin: builtin:file, settings: {path: "{tmp}/two"}}
""")
    assert payload["exit_code"] == 0, payload
    one, two = read_jsonl(tmp_path / "one"), read_jsonl(tmp_path / "two")
    assert [key_of(r) for r in one] == list(range(10))
    # The micro-batch is computed once for both: the records are identical, metadata (readAt) included.
    assert one == two
    assert payload["records"]["written"] == {"p:one": 10, "p:two": 10}


# --- examples --------------------------------------------------------------------------------------------


EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_validate(path: Path):
    loaded = load_pipeline_file(path)
    assert len(loaded.pipelines) >= 1


def test_examples_cover_every_plugin():
    used: set[str] = set()
    for path in EXAMPLES:
        for pipeline in load_pipeline_file(path).pipelines:
            used |= {c.plugin for c in pipeline.connectors}
            used |= {p.plugin for p in pipeline.processors}
            used |= {p.plugin for c in pipeline.connectors for p in c.processors}
            used.add(pipeline.dlq.plugin)
    assert set(PLUGINS) - used == set()
