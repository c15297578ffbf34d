"""custom.javascript without Spark: Conduit's documented input -> output pairs (the processor reference
example, ``javascript_examples_test.go``, and the cases of ``javascript_test.go``), the JS <-> record
mapping of a whole Arrow batch, and the settings that ``validate`` refuses."""

from __future__ import annotations

import copy
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.config import ConfigError, load_pipeline_text
from airflow_conduit.engine.processors._record_fields import RecordError
from airflow_conduit.engine.processors.custom_javascript import make
from airflow_conduit.engine.processors.custom_python import ArrowRecords
from airflow_conduit.javascript import check_script
from tests.arrow_batches import arrow_batch

EMPTY: dict[str, Any] = {
    "position": None,
    "operation": "create",
    "metadata": {},
    "key": None,
    "payload": {"before": None, "after": None},
}


def record(**fields: Any) -> dict[str, Any]:
    rec = copy.deepcopy(EMPTY)
    payload = fields.pop("payload", {})
    rec.update(fields)
    rec["payload"].update(payload)
    return rec


def run(script: str, rec: dict[str, Any]) -> dict[str, Any] | None:
    return make({"source": script})(copy.deepcopy(rec))


# --- Conduit's documented examples -------------------------------------------------------------------


def test_processor_reference_example() -> None:
    """javascript_examples_test.go: a metadata key added, "hello, " prepended to the raw payload."""
    script = """function process(rec) {
  rec.Metadata["processed"] = "true";
  let existing = String.fromCharCode.apply(String, rec.Payload.After);
  rec.Payload.After = RawData("hello, " + existing);
  return rec;
}"""
    have = record(metadata={"existing-key": "existing-value"}, payload={"after": b"world"})
    want = record(
        metadata={"existing-key": "existing-value", "processed": "true"}, payload={"after": b"hello, world"}
    )
    assert run(script, have) == want


def test_change_fields_of_a_structured_record() -> None:
    script = """
        function process(rec) {
            rec.Operation = "update";
            rec.Metadata["returned"] = "JS";
            rec.Key = RawData("baz");
            rec.Payload.After["ccc"] = "baz";
            return rec;
        }"""
    have = record(
        position=b"2",
        metadata={"existing": "val"},
        key=b"bar",
        payload={"after": {"aaa": 111, "bbb": ["foo", "bar"]}},
    )
    assert run(script, have) == record(
        position=b"2",
        operation="update",
        metadata={"existing": "val", "returned": "JS"},
        key=b"baz",
        payload={"after": {"aaa": 111, "bbb": ["foo", "bar"], "ccc": "baz"}},
    )


def test_replace_raw_data_with_structured_data_and_back() -> None:
    have = record(position=b"2", metadata={"existing": "val"}, key=b"bar", payload={"after": b"foo"})
    structured = """
        function process(rec) {
            rec.Metadata["returned"] = "JS";
            rec.Key = RawData("baz");
            rec.Payload.After = new StructuredData();
            rec.Payload.After["foo"] = "bar";
            return rec;
        }"""
    want = record(position=b"2", metadata={"existing": "val", "returned": "JS"}, key=b"baz")
    assert run(structured, have) == {**want, "payload": {"before": None, "after": {"foo": "bar"}}}
    raw = """
        function process(rec) {
            rec.Metadata["returned"] = "JS";
            rec.Key = RawData("baz");
            rec.Payload.After = RawData(String.fromCharCode.apply(String, rec.Payload.After) + "bar");
            return rec;
        }"""
    assert run(raw, have) == {**want, "payload": {"before": None, "after": b"foobar"}}


def test_a_new_record_has_empty_metadata_and_only_what_the_script_sets() -> None:
    script = """
        function process(record) {
            r = new Record();
            r.Position = "3"
            r.Metadata["returned"] = "JS";
            r.Key = new RawData("baz");
            r.Payload.After = new RawData("foobar");
            return r;
        }"""
    have = record(position=b"3", metadata={"dropped": "yes"}, payload={"after": {"x": 1}})
    # Conduit's Operation zero value: the record was not given one (its JSON form says so too).
    assert run(script, have) == record(
        position=b"3",
        operation="Operation(0)",
        metadata={"returned": "JS"},
        key=b"baz",
        payload={"after": b"foobar"},
    )
    assert run("function process(r) { return Record(); }", have)["metadata"] == {}


def test_filter() -> None:
    keep = 'function process(r) { if (r.Metadata["keepme"] != undefined) { return r } return null; }'
    assert run(keep, record(metadata={"keepme": "yes"})) == record(metadata={"keepme": "yes"})
    assert run(keep, record(metadata={"foo": "bar"})) is None
    assert run("function process(r) { return null; }", record()) is None


def test_data_types() -> None:
    assert (
        run('function process(rec) { rec.Position = "foobar"; return rec; }', record())["position"]
        == b"foobar"
    )
    assert run('function process(rec) { rec.Payload.After = new RawData("foobar"); return rec; }', record())[
        "payload"
    ]["after"] == (b"foobar")
    assert (
        run('function process(rec) { rec.Key = new RawData("foobar"); return rec; }', record())["key"]
        == b"foobar"
    )
    update = """function process(rec) {
        rec.Metadata["new_key"] = "new_value"
        delete rec.Metadata.remove_me;
        return rec;
    }"""
    have = record(metadata={"old_key": "old_value", "remove_me": "remove_me"})
    assert run(update, have)["metadata"] == {"old_key": "old_value", "new_key": "new_value"}


def test_script_with_several_functions() -> None:
    script = """
        function getValue() { return "updated_value"; }
        function process(rec) { rec.Metadata["updated_key"] = getValue(); return rec; }"""
    have = record(metadata={"old_key": "old_value"})
    assert run(script, have)["metadata"] == {"old_key": "old_value", "updated_key": "updated_value"}


def test_a_thrown_error_nacks_with_its_message_and_place() -> None:
    with pytest.raises(RecordError, match=r"^Error: something bad happened at process \(script\.js:2:"):
        run("function process(r) {\n  throw new Error('something bad happened');\n}", record())
    # A JavaScript exception of the engine's own (Conduit: a goja.Exception).
    with pytest.raises(RecordError, match="^TypeError: Cannot read properties of undefined"):
        run("function process(record) {\n  var m;\n  m.test\n}", record(key=b"test key"))


def test_what_is_not_a_record_nacks_and_unknown_operations_too() -> None:
    with pytest.raises(RecordError, match="js function expected to return a record.*returned: object"):
        run("function process(r) { return {Position: r.Position}; }", record())
    with pytest.raises(
        RecordError, match='could not unmarshal operation: operation "upsert": unknown operation'
    ):
        run('function process(r) { r.Operation = "upsert"; return r; }', record())
    assert (
        run('function process(r) { r.Operation = "Operation(3)"; return r; }', record())["operation"]
        == "delete"
    )


def test_only_raw_data_or_a_map_survives_as_conduit_keeps_them() -> None:
    """Conduit converts the data fields back from *RawData or a map; anything else becomes nil."""
    have = record(key=b"k", payload={"before": {"a": 1}, "after": {"b": 2}})
    out = run('function process(r) { r.Key = "text"; r.Payload.Before = [1, 2]; return r; }', have)
    assert out["key"] is None and out["payload"]["before"] is None and out["payload"]["after"] == {"b": 2}


def test_raw_bytes_round_trip_exactly() -> None:
    every_byte = bytes(range(256))
    assert run("function process(r) { return r; }", record(key=every_byte, position=every_byte)) == record(
        key=every_byte, position=every_byte
    )
    # RawData("text") is the text's UTF-8, as Go's []byte(string).
    out = run('function process(r) { r.Key = RawData("é€"); return r; }', record())
    assert out["key"] == "é€".encode()


def test_logger_lines_reach_python_logging(caplog: pytest.LogCaptureFixture) -> None:
    script = 'function process(r) { logger.Info().Str("id", "7").Msg("Hello"); logger.Debug("x"); return r; }'
    with caplog.at_level(logging.INFO, logger="airflow_conduit.javascript"):
        assert run(script, record()) == record()
    assert [r.getMessage() for r in caplog.records] == ['Hello {"id": "7"}']


def test_the_script_is_compiled_once_and_keeps_its_globals() -> None:
    """One V8 context per process (as Conduit's pooled goja contexts): a counter persists."""
    script = "var seen = 0; function process(r) { seen++; r.Metadata.seen = String(seen); return r; }"
    processor = make({"source": script})
    assert [processor(record())["metadata"]["seen"] for _ in range(3)] == ["1", "2", "3"]
    assert make({"source": script}).runtime is processor.runtime


# --- a whole Arrow batch --------------------------------------------------------------------------------


def test_map_batch_maps_columns_and_marks_filtered_and_nacked_rows() -> None:
    script = """function process(r) {
        const name = r.Payload.After && r.Payload.After.name;
        if (name === "drop") return null;
        if (name === "boom") throw new Error("boom");
        if (r.Payload.After) r.Payload.After.upper = name.toUpperCase();
        r.Metadata.raw = String(r.Key instanceof RawData) + "/" + String.fromCharCode.apply(String, r.Key || []);
        return r;
    }"""
    batch = ArrowRecords(
        arrow_batch(
            [
                {
                    "position": b"1",
                    "operation": "create",
                    "metadata": [("m", "1")],
                    "key_raw": b"k1",
                    "after_json": '{"name":"ann","n":1.5,"list":[1,{"x":null}]}',
                },
                {"position": b"2", "operation": "update", "after_json": '{"name":"drop"}'},
                {"position": b"3", "operation": "create", "after_json": '{"name":"boom"}'},
                {
                    "position": b"4",
                    "operation": "create",
                    "after_json": '{"name":"skipped"}',
                    "_active": False,
                },
                {
                    "position": b"5",
                    "operation": "snapshot",
                    "key_json": '{"id":5}',
                    "before_raw": b"\x00\xff",
                },
            ]
        )
    )
    make({"source": script}).map_batch(batch, "p:js")
    c = batch.columns
    # A mapper's _state is set where it marks a record; the others keep the state they came with.
    assert c["_state"] == [None, "filtered", "nacked", None, None]
    assert c["_error"][2].startswith("Error: boom at process (script.js:4:") and c["_node"][2] == "p:js"
    assert c["after_json"][0] == '{"name":"ann","n":1.5,"list":[1,{"x":null}],"upper":"ANN"}'
    assert dict(c["metadata"][0]) == {"m": "1", "raw": "true/k1"} and c["key_raw"][0] == b"k1"
    assert c["after_json"][3] == '{"name":"skipped"}' and c["metadata"][3] is None  # not active: untouched
    assert (c["key_json"][4], c["key_raw"][4]) == ('{"id":5}', None)
    assert (c["before_json"][4], c["before_raw"][4]) == (None, b"\x00\xff")
    assert c["operation"][4] == "snapshot" and c["position"][4] == b"5"


# --- settings -------------------------------------------------------------------------------------------


def load(processor_settings: str, tmp_path: Path) -> Any:
    text = textwrap.dedent(
        """\
        version: "2.2"
        pipelines:
          - id: p
            connectors:
              - {id: src, type: source, plugin: builtin:generator}
              - {id: dst, type: destination, plugin: builtin:log}
            processors:
              - id: js
                plugin: custom.javascript
                settings:
        """
    ) + textwrap.indent(textwrap.dedent(processor_settings), " " * 10)
    return load_pipeline_text(text, str(tmp_path / "p.yaml"))


def issue(processor_settings: str, tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load(processor_settings, tmp_path)
    [only] = caught.value.issues
    return str(only)


def test_script_path_is_read_at_load_relative_to_the_pipeline_file(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "p.js").write_text('function process(r) { r.Metadata.js = "yes"; return r; }')
    loaded = load("script.path: scripts/p.js\n", tmp_path)
    settings = loaded.pipelines[0].processors[0].settings
    assert settings.script_path == str(tmp_path / "scripts" / "p.js")
    assert "r.Metadata.js" in settings.source
    # The executors get the text with the settings, not the path.
    assert make(settings.model_dump(by_alias=True))(record())["metadata"] == {"js": "yes"}


def test_refused_at_validate_with_file_line_and_field(tmp_path: Path) -> None:
    message = issue("script: |\n  function process(r) {\n    return r +;\n  }\n", tmp_path)
    assert message.startswith(f"{tmp_path / 'p.yaml'}:11: pipelines[0].processors[0].settings.script: ")
    assert "failed to compile script: line 2: SyntaxError: Unexpected token ';' (script line 2)" in message
    assert issue("script: 'function proc(r) { return r; }'\n", tmp_path).endswith(
        'failed to get entrypoint function "process"'
    )
    missing = issue("script.path: nope.js\n", tmp_path)
    assert (
        f":11: pipelines[0].processors[0].settings.script.path: error reading script from path {tmp_path / 'nope.js'}"
        in missing
    )
    (tmp_path / "bad.js").write_text("function process(r) {\n\n  return r +;\n}\n")
    bad = issue("script.path: bad.js\n", tmp_path)
    assert bad.endswith(f"line 3: SyntaxError: Unexpected token ';' ({tmp_path / 'bad.js'} line 3)")


def test_exactly_one_of_script_and_script_path(tmp_path: Path) -> None:
    (tmp_path / "p.js").write_text("function process(r) { return r; }")
    both = "script: 'function process(r) { return r; }'\nscript.path: p.js\n"
    assert issue(both, tmp_path).endswith("only one of: [script, script.path] should be provided")
    assert issue("{}\n", tmp_path).endswith("one of: [script, script.path] needs to be provided")


def test_check_script_stops_a_top_level_that_never_ends() -> None:
    problem = check_script("while (true) {}\nfunction process(r) { return r; }")
    assert problem is not None and "ran longer than" in str(problem)
    assert check_script("const process = (r) => r;") is None  # a top-level const counts too


def test_fields_the_script_does_not_touch_are_kept_as_they_came() -> None:
    """Only touched fields are converted back: an untouched structured key keeps its exact JSON text
    (a number beyond 2^53 included), a touched one is JavaScript's rewrite."""
    rows = [
        {
            "position": b"1",
            "operation": "create",
            "key_json": '{"id": 12345678901234567891}',
            "after_json": '{"a": 1}',
        }
    ]
    batch = ArrowRecords(arrow_batch(rows))
    make({"source": "function process(r) { r.Payload.After.b = 2; return r; }"}).map_batch(batch, "p:js")
    assert batch.columns["key_json"] == ['{"id": 12345678901234567891}']
    assert batch.columns["after_json"] == ['{"a":1,"b":2}']
    batch = ArrowRecords(arrow_batch(rows))
    make({"source": "function process(r) { r.Key.seen = true; return r; }"}).map_batch(batch, "p:js")
    assert batch.columns["key_json"] == ['{"id":12345678901234567000,"seen":true}']


def test_the_record_enumerates_and_prints_like_conduits() -> None:
    script = """function process(r) {
        r.Metadata.keys = Object.keys(r).join() + "|" + [...(function* () { for (const k in r) yield k; })()].join();
        r.Metadata.json = JSON.stringify(r);
        r.Payload = {After: StructuredData()};
        return r;
    }"""
    out = run(script, record(operation="update", metadata={"m": "1"}, key=b"k", payload={"after": {"x": 1}}))
    assert out["metadata"]["keys"] == "|Position,Operation,Metadata,Key,Payload"
    assert out["metadata"]["json"] == (
        '{"Position":null,"Operation":"update","Metadata":{"m":"1","keys":"|Position,Operation,Metadata,Key,Payload"},'
        '"Key":{"0":107},'
        '"Payload":{"Before":null,"After":{"x":1}}}'
    )
    assert out["payload"] == {"before": None, "after": {}} and out["key"] == b"k"


def test_a_record_kept_from_an_earlier_row_is_returned_whole() -> None:
    script = "var first = null; function process(r) { if (first === null) { first = r; } return first; }"
    rows = [
        {"position": b"1", "operation": "create", "key_raw": b"k1", "after_json": '{"n":1}'},
        {"position": b"2", "operation": "update", "key_raw": b"k2", "after_json": '{"n":2}'},
    ]
    batch = ArrowRecords(arrow_batch(rows))
    make({"source": script}).map_batch(batch, "p:js")
    c = batch.columns
    assert (c["position"], c["operation"], c["key_raw"]) == (
        [b"1", b"1"],
        ["create", "create"],
        [b"k1", b"k1"],
    )
    assert c["after_json"] == ['{"n":1}', '{"n":1}']
