"""``sdk.record.format``: the serializers against the connector SDK's own expectations
(conduit-connector-sdk ``record_serializer_test.go``: the same input records, the same outputs), the
Go JSON they are written with, and the settings (validation, refusals)."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest

from airflow_conduit.config import load_pipeline_text
from airflow_conduit.config.errors import ConfigError
from airflow_conduit.config.settings.record_format import RecordFormat, format_options
from airflow_conduit.engine.connectors.record_format import (
    debezium_envelope,
    read_at_millis,
    reflect,
    serializer,
    structured,
)
from airflow_conduit.gotemplate import Template, TemplateExecError
from airflow_conduit.gotemplate.gojson import _go_float_from_digits, go_float, go_json
from airflow_conduit.gotemplate.opencdc import from_record_dict
from airflow_conduit.gotemplate.values import format_float, format_float_from_digits

# The SDK tests' record: Position "foo", create, one metadata key, raw key "bar", structured after.
SDK_RECORD: dict[str, Any] = {
    "position": b"foo",
    "operation": "create",
    "metadata": {"conduit.source.plugin.name": "example"},
    "key": b"bar",
    "payload": {"before": None, "after": {"foo": "bar", "baz": "qux"}},
}
# TestJSONEncoder's want (and the "json record" template case's).
SDK_OPENCDC_JSON = (
    '{"position":"Zm9v","operation":"create","metadata":{"conduit.source.plugin.name":"example"},'
    '"key":"YmFy","payload":{"before":null,"after":{"baz":"qux","foo":"bar"}}}'
)
RAW_OR_JSON = (
    '{{ if typeIs "opencdc.RawData" .Payload.After }}{{ printf "%s" .Payload.After }}'
    "{{ else }}{{ toJson .Payload.After }}{{ end }}"
)


def render(template: str, record: dict[str, Any]) -> str:
    return serializer(RecordFormat("template", template=template))(record)


def test_opencdc_json_is_the_sdk_json_encoder_output():
    assert serializer(RecordFormat())(SDK_RECORD) == SDK_OPENCDC_JSON


@pytest.mark.parametrize(
    ("template", "record", "want"),
    [
        (
            "{{ . }}",
            SDK_RECORD,
            "{foo create map[conduit.source.plugin.name:example] [98 97 114] {<nil> map[baz:qux foo:bar]} <nil>}",
        ),
        ("{{ toJson . }}", SDK_RECORD, SDK_OPENCDC_JSON),
        (RAW_OR_JSON, SDK_RECORD, '{"baz":"qux","foo":"bar"}'),
        (RAW_OR_JSON, {"payload": {"after": b"my raw data"}}, "my raw data"),
        (RAW_OR_JSON, {"payload": {"after": None}}, "null"),
        ("{{ .Metadata }}", SDK_RECORD, "map[conduit.source.plugin.name:example]"),
    ],
    ids=[
        "go record",
        "json record",
        "json structured payload",
        "json raw payload",
        "json nil payload",
        "map",
    ],
)
def test_template_cases_of_the_sdk(template, record, want):
    assert render(template, record) == want


@pytest.mark.parametrize(
    ("template", "record", "fails"),
    [
        ("{{.Key}}", {"key": b"test-key"}, False),
        ("{{.NonExistentKey}}", {"key": b"test-key"}, True),
        ("{{.Metadata.nonexistent}}", {"metadata": {"existing": "value"}}, True),
        ("{{.Key}} {{.NonExistentKey}}", {"key": b"test-key"}, True),
        ("{{.Payload.After.missing}}", {"payload": {"after": {"there": 1}}}, True),
    ],
)
def test_template_missing_key_is_an_error_and_the_record_falls_back_to_opencdc_json(template, record, fails):
    go_record = from_record_dict(record)
    if fails:
        with pytest.raises(TemplateExecError):
            Template.parse(template).execute(go_record, missing_key_error=True)
        # Conduit's Record.Bytes writes the default format when the serializer fails.
        assert render(template, record) == go_json(go_record)
        assert list(json.loads(render(template, record))) == [
            "position",
            "operation",
            "metadata",
            "key",
            "payload",
        ]
    else:
        assert render(template, record) == "[116 101 115 116 45 107 101 121]"  # RawData prints as bytes


def test_processor_templates_keep_go_default_missing_keys():
    """The option is the serializer's only: a condition or field.set value still sees <no value>."""
    go_record = from_record_dict({"payload": {"after": {"there": 1}}})
    assert Template.parse("{{ .Payload.After.missing }}").execute(go_record) == "<no value>"


def _sorted_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """As the SDK test does (kafkaconnect.SortFields): Go lists a map's fields in random order."""
    if "fields" in schema:
        schema = {
            **schema,
            "fields": sorted((_sorted_schema(f) for f in schema["fields"]), key=lambda f: f["field"]),
        }
    return schema


TRANSACTION_SCHEMA = {
    "type": "struct",
    "optional": True,
    "fields": [
        {"type": "string", "field": "id"},
        {"type": "int64", "field": "total_order"},
        {"type": "int64", "field": "data_collection_order"},
    ],
    "field": "transaction",
}
SOURCE_SCHEMA = {
    "type": "struct",
    "optional": True,
    "fields": [{"type": "string", "field": "conduit.source.plugin.name"}],
    "field": "source",
}


def test_debezium_structured_as_the_sdk_test():
    record = {
        **SDK_RECORD,
        "operation": "update",
        "payload": {"before": {"bar": 123}, "after": {"foo": "bar", "baz": "qux"}},
    }
    options = format_options("debezium.schema.name=custom.name")
    out = serializer(RecordFormat("debezium/json", schema_name=options["debezium.schema.name"]))(record)
    want_schema = {
        "type": "struct",
        "name": "custom.name",
        "fields": [
            {
                "type": "struct",
                "optional": True,
                "fields": [{"type": "int64", "field": "bar"}],
                "field": "before",
            },
            {
                "type": "struct",
                "optional": True,
                "fields": [{"type": "string", "field": "foo"}, {"type": "string", "field": "baz"}],
                "field": "after",
            },
            SOURCE_SCHEMA,
            {"type": "string", "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            TRANSACTION_SCHEMA,
        ],
    }
    want_payload = {
        "before": {"bar": 123},
        "after": {"foo": "bar", "baz": "qux"},
        "source": {"conduit.source.plugin.name": "example"},
        "op": "u",
        "transaction": None,  # ts_ms 0 is left out (omitempty)
    }
    got = json.loads(out)
    assert list(got) == ["schema", "payload"]
    assert list(got["payload"]) == ["before", "after", "source", "op", "transaction"]
    assert [f["field"] for f in got["schema"]["fields"]] == [
        "before",
        "after",
        "source",
        "op",
        "ts_ms",
        "transaction",
    ]
    assert _sorted_schema(got["schema"]) == _sorted_schema(want_schema)
    assert got["payload"] == want_payload


def test_debezium_raw_data_as_the_sdk_test():
    record = {**SDK_RECORD, "payload": {"before": b"foo", "after": None}}
    got = json.loads(serializer(RecordFormat("debezium/json"))(record))
    raw_schema = {"type": "bytes", "optional": True, "field": "opencdc.rawData"}
    assert got["schema"] == {
        "type": "struct",
        "fields": [
            {"type": "struct", "optional": True, "fields": [raw_schema], "field": "before"},
            {"type": "struct", "optional": True, "fields": [raw_schema], "field": "after"},
            SOURCE_SCHEMA,
            {"type": "string", "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            TRANSACTION_SCHEMA,
        ],
    }
    assert got["payload"] == {
        "before": {"opencdc.rawData": base64.b64encode(b"foo").decode()},
        "after": None,
        "source": {"conduit.source.plugin.name": "example"},
        "op": "c",
        "transaction": None,
    }


def test_debezium_exact_bytes_of_a_small_event():
    record = {
        "operation": "snapshot",
        "metadata": {"opencdc.readAt": "1700000000123456789", "b": "<x>"},
        "payload": {"after": b'{"n":2,"s":"a"}'},
    }
    out = serializer(RecordFormat("debezium/json", raw_data_key="raw"))(record)
    after_schema = '{"type":"struct","optional":true,"fields":[{"type":"double","field":"n"},{"type":"string","field":"s"}]'
    assert out == (
        '{"schema":{"type":"struct","fields":['
        f'{after_schema},"field":"before"}},{after_schema},"field":"after"}},'
        '{"type":"struct","optional":true,"fields":[{"type":"string","field":"b"},'
        '{"type":"string","field":"opencdc.readAt"}],"field":"source"},'
        '{"type":"string","field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},'
        '{"type":"struct","optional":true,"fields":[{"type":"string","field":"id"},'
        '{"type":"int64","field":"total_order"},{"type":"int64","field":"data_collection_order"}],'
        '"field":"transaction"}]},'
        '"payload":{"before":null,"after":{"n":2,"s":"a"},'
        '"source":{"b":"\\u003cx\\u003e","opencdc.readAt":"1700000000123456789"},'
        '"op":"r","ts_ms":1700000000123,"transaction":null}}'
    )


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (b"", None),
        (b"null", None),
        (b'{"a":1,"b":[1,"x"]}', {"a": 1.0, "b": [1.0, "x"]}),
        (b"[1,2]", {"k": b"[1,2]"}),
        (b'"text"', {"k": b'"text"'}),
        (b"not json", {"k": b"not json"}),
        (b'{"a":1e400}', {"k": b'{"a":1e400}'}),
        (b'{"a":NaN}', {"k": b'{"a":NaN}'}),
    ],
)
def test_debezium_raw_data_is_a_json_object_or_hoisted(raw, want):
    got = structured(raw, "k")
    assert got == want
    if isinstance(want, dict) and "a" in want:
        assert isinstance(got["a"], float)  # Go unmarshals JSON numbers as float64


def test_reflect_kinds_as_kafkaconnect():
    assert reflect({"b": True, "i": 1, "f": 1.5, "s": "x", "n": None, "l": [], "m": {}, "r": b"x"}) == {
        "type": "struct",
        "optional": True,
        "fields": [
            {"type": "boolean", "field": "b"},
            {"type": "double", "field": "f"},
            {"type": "int64", "field": "i"},
            {"type": "array", "optional": True, "items": {"type": "string", "optional": True}, "field": "l"},
            {"type": "struct", "optional": True, "field": "m"},
            {"type": "string", "optional": True, "field": "n"},
            {"type": "bytes", "optional": True, "field": "r"},
            {"type": "string", "field": "s"},
        ],
    }
    assert reflect([{"a": 1}])["items"] == {
        "type": "struct",
        "optional": True,
        "fields": [{"type": "int64", "field": "a"}],
    }


def test_debezium_nothing_at_all_has_empty_struct_schemas():
    envelope = debezium_envelope({"operation": "delete", "metadata": None})
    fields = envelope["schema"]["fields"]
    assert fields[0] == {"type": "struct", "optional": True, "field": "before"}
    assert fields[2] == {"type": "struct", "optional": True, "field": "source"}
    assert envelope["payload"]["op"] == "d" and envelope["payload"]["source"] is None


@pytest.mark.parametrize(
    ("metadata", "want"),
    [
        ({"opencdc.readAt": "1500000"}, 1),
        ({"opencdc.readAt": "x"}, 0),
        ({}, 0),
        (None, 0),
        ({"opencdc.readAt": str(1 << 63)}, 0),
    ],
)
def test_read_at_millis(metadata, want):
    assert read_at_millis(metadata) == want


def test_format_options_as_the_sdk_parses_them():
    assert format_options("  ") == {}
    assert format_options("a=1,b=x=y,c") == {"a": "1", "b": "x=y", "c": ""}


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (1.0, "1"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (-0.0, "-0"),
        (2.5e-300, "2.5e-300"),
    ],
)
def test_go_float(value, want):
    assert go_float(value) == want


@pytest.mark.parametrize(
    ("shortcut", "digit_by_digit"),
    [(go_float, _go_float_from_digits), (format_float, format_float_from_digits)],
    ids=["encoding/json", "fmt %v"],
)
def test_float_shortcut_matches_the_digit_by_digit_form(shortcut, digit_by_digit):
    """The repr shortcuts (JSON: 1e-4 to 1e16; ``%v``: 1e-4 to 1e6) give what the general form gives,
    over every magnitude."""
    rng = random.Random(21)
    values = [0.0, -0.0, 1e-4, 9.999e-5, 1e16, 9999999999999998.0, 0.1 + 0.2, 123456789.0, -5.0]
    values += [1e6, 999999.9999999999, 1e5, 100.0, float("inf"), float("-inf")]
    for _ in range(20_000):
        mantissa = rng.choice(
            [rng.random(), round(rng.random() * 1000, rng.randint(0, 6)), rng.randint(1, 99)]
        )
        values.append(rng.choice([1, -1]) * mantissa * 10.0 ** rng.randint(-9, 22))
    for value in values:
        try:
            expected = digit_by_digit(value)
        except ValueError:  # JSON has no infinities
            with pytest.raises(ValueError):
                shortcut(value)
            continue
        assert shortcut(value) == expected, value


def test_go_json_strings_as_go_writes_them():
    assert go_json('tab\t nl\n quote" back\\ bell\x07') == '"tab\\t nl\\n quote\\" back\\\\ bell\\u0007"'
    assert go_json("é<b>&\u2029") == '"é\\u003cb\\u003e\\u0026\\u2029"'
    assert go_json("x\ud800y") == '"x\ufffdy"'  # a lone surrogate is invalid UTF-8: Go writes U+FFFD
    assert go_json({"z": 1, "a": [1.5, None, True]}, escape_html=False) == '{"a":[1.5,null,true],"z":1}'
    assert go_json({"<k>": "<v>\u2028"}, escape_html=False) == '{"<k>":"<v>\\u2028"}'


def test_go_json_escapes_html_unless_raw():
    assert go_json({"b": "<&>\u2028", "a": b"\x00"}) == '{"a":"AA==","b":"\\u003c\\u0026\\u003e\\u2028"}'
    assert Template.parse("{{ toRawJson . }}").execute({"k": "<a>"}) == '{"k":"<a>"}'


# settings --------------------------------------------------------------------------------------------


def pipeline(destination: str) -> str:
    return f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {{recordCount: "1"}}}}
      - {{id: out, type: destination, {destination}}}
"""


def refused(destination: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_pipeline_text(pipeline(destination), "p.yaml")
    return str(error.value)


def test_settings_give_the_engine_its_format():
    loaded = load_pipeline_text(
        pipeline(
            "plugin: builtin:file, settings: {path: /tmp/o, sdk.record.format: debezium/json, "
            "sdk.record.format.options: 'debezium.rawData.key=raw,debezium.schema.name=s,other=1'}"
        ),
        "p.yaml",
    )
    settings = loaded.pipelines[0].connectors[1].settings
    assert settings.output_format == RecordFormat("debezium/json", schema_name="s", raw_data_key="raw")
    default = load_pipeline_text(pipeline("plugin: builtin:log"), "p.yaml").pipelines[0].connectors[1]
    assert default.settings.output_format.is_default


def test_unknown_format_is_refused_with_the_supported_list():
    message = refused("plugin: builtin:log, settings: {sdk.record.format: avro/json}")
    assert "p.yaml:" in message and "settings.sdk.record.format" in message
    assert "'avro/json' is not supported (supported: debezium/json, opencdc/json, template)" in message


def test_bad_template_is_refused_at_validate():
    message = refused(
        "plugin: builtin:file, settings: {path: /tmp/o, sdk.record.format: template, "
        "sdk.record.format.options: '{{ .Key '}"
    )
    assert "settings.sdk.record.format.options: not a valid Go template" in message
    assert "not defined" in refused(
        "plugin: builtin:log, settings: {sdk.record.format: template, sdk.record.format.options: '{{ nope . }}'}"
    )


def test_row_writing_destinations_take_only_the_default():
    message = refused(
        "plugin: builtin:postgres, settings: {url: 'postgres://u@h/d', sdk.record.format: template}"
    )
    assert "only opencdc/json here: builtin:postgres writes" in message
    load_pipeline_text(
        pipeline(
            "plugin: builtin:postgres, settings: {url: 'postgres://u@h/d', sdk.record.format: opencdc/json}"
        ),
        "p.yaml",
    )
