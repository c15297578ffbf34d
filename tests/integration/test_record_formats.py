"""``sdk.record.format`` in real pipelines on the shared SparkSession: the file destination writes each
format, the log destination prints the template; and the Spark paths (the JVM's opencdc/json, Arrow for
the others) give the connector SDK's bytes for its test record."""

from __future__ import annotations

import json
import logging
import math
import random
import struct
from pathlib import Path

from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.config.settings.record_format import RecordFormat
from airflow_conduit.config.template_sql import source_text_sql
from airflow_conduit.engine.connectors.generator import GeneratorSpec
from airflow_conduit.engine.connectors.record_format import record_lines, serializer
from airflow_conduit.engine.processors.custom_python import ArrowRecords
from airflow_conduit.record import record_text_sql
from tests.conftest import ESCAPED_TEXT
from tests.unit.test_record_format import SDK_OPENCDC_JSON

SETTINGS = {"recordCount": 7, "maxRecordsPerBatch": 3, "seed": 5}
SPEC = GeneratorSpec.from_settings(GeneratorSettings.model_validate(SETTINGS))


def after_of(i: int) -> dict:
    return json.loads(SPEC.row(i)[7])


def lines_of(directory: Path) -> list[str]:
    """The lines of a file destination's directory, in delivery order."""
    return [line for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


def pipeline(destination_settings: str, plugin: str = "builtin:file") -> str:
    return f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {json.dumps(SETTINGS)}}}
      - id: out
        type: destination
        plugin: {plugin}
        settings:
{destination_settings}
"""


SDK_RECORD_SQL = """
SELECT CAST('foo' AS BINARY) AS position, 'create' AS operation,
       map('conduit.source.plugin.name', 'example') AS metadata,
       CAST(NULL AS VARIANT) AS key, CAST('bar' AS BINARY) AS key_raw,
       CAST(NULL AS VARIANT) AS before, CAST(NULL AS BINARY) AS before_raw,
       parse_json('{"foo":"bar","baz":"qux"}') AS after, CAST(NULL AS BINARY) AS after_raw
"""


def test_spark_paths_write_the_sdk_bytes(spark):
    records = spark.sql(SDK_RECORD_SQL)
    [opencdc] = [r.value for r in record_lines(records).collect()]
    assert opencdc == SDK_OPENCDC_JSON  # the JVM path: the SDK's JSONEncoder output, byte for byte
    template = RecordFormat("template", template="{{ toJson . }}|{{ .Metadata }}")
    [rendered] = [r.value for r in record_lines(records, template).collect()]
    assert rendered == SDK_OPENCDC_JSON + "|map[conduit.source.plugin.name:example]"
    [debezium] = [r.value for r in record_lines(records, RecordFormat("debezium/json")).collect()]
    event = json.loads(debezium)
    assert event["payload"] == {
        "before": None,
        "after": {"foo": "bar", "baz": "qux"},
        "source": {"conduit.source.plugin.name": "example"},
        "op": "c",
        "transaction": None,
    }


def test_opencdc_json_holds_the_values_go_writes(spark):
    """The JVM's opencdc/json line holds the same JSON values as the Go-exact serializer the other
    formats use, though not always the same bytes: Spark's to_json writes <, >, & and U+2028/U+2029 as
    they are where Go escapes them, and a double in Java's form (1.0E21 where Go writes 1e+21); see
    docs/connectors.md, Record formats."""
    records = spark.sql(
        SDK_RECORD_SQL.replace(
            """parse_json('{"foo":"bar","baz":"qux"}')""",
            """parse_json('{"a<b>&c":"x < y && z > 1","sep":"line\\u2028para\\u2029","n":[1,"<&>"],'"""
            """ || '"big":1e21,"small":1.5e-7,"exp":1.5e3,"plain":12.5,"int":12345678901234567890}')""",
        ).replace("'example'", "'<example & co>'")
    )
    [line] = [r.value for r in record_lines(records).collect()]
    # The record as the Python formats read it (record_lines' mapInArrow).
    [arrow_batch] = records.selectExpr(*record_text_sql())._collect_as_arrow()
    go_line = serializer(RecordFormat("opencdc/json"))(ArrowRecords(arrow_batch).record(0))
    assert json.loads(line) == json.loads(go_line)
    assert json.loads(line)["payload"]["after"]["sep"] == "line\u2028para\u2029"
    # The documented differences in bytes, so that the docs change when they do.
    assert '"a<b>&c":"x < y && z > 1"' in line and '"big":1.0E21' in line, line
    assert '"a\\u003cb\\u003e\\u0026c"' in go_line and '"big":1e+21' in go_line, go_line


def test_file_destination_writes_debezium_json(run_yaml, tmp_path):
    payload = run_yaml(
        pipeline(
            '          path: "{tmp}/out"\n          sdk.record.format: debezium/json\n'
            "          sdk.record.format.options: debezium.schema.name=gen.users\n"
        )
    )
    assert payload["exit_code"] == 0, payload
    events = [json.loads(line) for line in lines_of(tmp_path / "out")]
    assert [e["payload"]["after"] for e in events] == [after_of(i) for i in range(7)]  # all, in order, once
    for event in events:
        assert event["schema"]["name"] == "gen.users"
        assert [f["field"] for f in event["schema"]["fields"]] == [
            "before",
            "after",
            "source",
            "op",
            "ts_ms",
            "transaction",
        ]
        source = event["payload"]["source"]
        assert event["payload"]["op"] == "c" and event["payload"]["before"] is None
        assert event["payload"]["ts_ms"] == int(source["opencdc.readAt"]) // 1_000_000
        assert source["conduit.source.connector.id"] == "p:gen"


def test_file_destination_writes_a_template_per_record_and_default_is_unchanged(run_yaml, tmp_path):
    payload = run_yaml(
        pipeline(
            '          path: "{tmp}/out"\n          sdk.record.format: template\n'
            '          sdk.record.format.options: \'{{ printf "%s" .Key }}={{ .Payload.After.name }}'
            "{{ if .Metadata.nope }}x{{ end }}'\n"
        )
    )
    assert payload["exit_code"] == 0, payload
    lines = lines_of(tmp_path / "out")
    # .Metadata.nope is a missing key: Conduit writes such a record as opencdc/json instead.
    assert len(lines) == 7
    fallback = [json.loads(line) for line in lines]
    assert [r["payload"]["after"] for r in fallback] == [after_of(i) for i in range(7)]

    (tmp_path / "state").rename(tmp_path / "state-1")
    payload = run_yaml(
        pipeline(
            '          path: "{tmp}/out2"\n          sdk.record.format: template\n'
            "          sdk.record.format.options: '{{ printf \"%s\" .Key }}={{ .Payload.After.name }}'\n"
        )
    )
    assert payload["exit_code"] == 0, payload
    assert lines_of(tmp_path / "out2") == [f"{i}={after_of(i)['name']}" for i in range(7)]


def test_log_destination_prints_the_template(run_yaml, caplog):
    caplog.set_level(logging.INFO, logger="airflow_conduit.destination.log")
    payload = run_yaml(
        pipeline(
            "          message: users\n          sdk.record.format: template\n"
            "          sdk.record.format.options: '{{ .Payload.After.name | upper }}'\n",
            plugin="builtin:log",
        )
    )
    assert payload["exit_code"] == 0, payload
    logged = [r.getMessage() for r in caplog.records if r.name == "airflow_conduit.destination.log"]
    assert logged == [f"users: {after_of(i)['name'].upper()}" for i in range(7)]


GO_JSON_VALUES = [
    "1",
    "-9223372036854775808",
    "0",
    "-0.0",
    "-0e0",
    "2.5",
    "12.50",
    "0.000001",
    "0.0000001",
    "-0.00000012345",
    "123456789012.345",
    # More than 15 digits: the float64's shortest form is searched for.
    "0.30000000000000004",
    "123456789.123456789",
    "-999999999999999999.5",
    # Decimals of 16 bytes: an integer is read back exactly, a fraction as a float64.
    "12345678901234567890",
    "12345678901234567890.125",
    "100000000000000000000000000000.0",
    # Doubles (exponents), where Java 17's Double.toString is not always the shortest.
    "1e21",
    "1e20",
    "1.5e-7",
    "1e-6",
    "5e-324",
    "1.7976931348623157e308",
    "2.82879384806159e17",
    "1e23",
    "9.5367431640625e-7",
    "8.98846567431158e307",
    "-4.35e2",
    "true",
    "null",
    '""',
    json.dumps(ESCAPED_TEXT),
    json.dumps("<b>&amp;</b> \u2028\u2029 \x7f \x01\x1f é 😀"),
    json.dumps({"b": 1, "a": [2, {"d": None, "c": "<>"}], "<&>": False}),
    # Spark orders these keys by UTF-16 (U+1F600 before U+FFFF), Go by their bytes.
    json.dumps({"\uffff": 1, "😀": 2, "z": 3, "é": 4}),
    json.dumps({f"key {i} é": [i, f"v{i}", i / 8] for i in range(300)}),
    json.dumps([{"x": i} for i in range(300)]),
    json.dumps({"k" * 300: {"nested": ["a" * 70, {"deep": [None, True, 1.5e-7, 1e22]}]}}),
]
GO_JSON_CASTS = [
    "cast(cast('NaN' AS double) AS variant)",
    "cast(cast('Infinity' AS double) AS variant)",
    "cast(cast('-Infinity' AS double) AS variant)",
    "cast(cast(1.25 AS float) AS variant)",
    "cast(cast(0.1 AS float) AS variant)",
    "cast(cast(-3.10 AS decimal(5, 2)) AS variant)",
    "cast(cast(12345678901234567890.5 AS decimal(38, 2)) AS variant)",
    "cast(date'2024-02-29' AS variant)",
    "cast(timestamp'2024-02-29 23:59:58.123456' AS variant)",
    "cast(timestamp_ntz'2024-02-29 23:59:58.5' AS variant)",
    "cast(X'00ff10' AS variant)",
    "cast(cast(7 AS tinyint) AS variant)",
]


def test_json_templates_in_the_jvm_print_what_go_prints(spark):
    """``{{ toJson .Payload.After }}`` and its kin run as Spark SQL (``conduit_go_json``), and give the
    same text as the Python templates that read each value back from its JSON: every kind of value,
    alone and nested, raw data and no value."""
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        parsed = spark.createDataFrame([(v,) for v in GO_JSON_VALUES], "j string").selectExpr(
            "parse_json(j) AS v"
        )
        cast = spark.range(1).selectExpr(f"explode(array({', '.join(GO_JSON_CASTS)})) AS v")
        values = parsed.unionAll(cast)
        nested = values.selectExpr("to_variant_object(named_struct('k', v, 'a', array(v, v))) AS v")
        records = (
            values.unionAll(nested)
            .selectExpr(
                "CAST('p' AS BINARY) AS position",
                "'create' AS operation",
                "map('m', 'x') AS metadata",
                "v AS key",
                "CAST(NULL AS BINARY) AS key_raw",
                "CAST(NULL AS VARIANT) AS before",
                "CAST('<raw>\u2028' AS BINARY) AS before_raw",
                "v AS after",
                "CAST(NULL AS BINARY) AS after_raw",
            )
            .unionAll(spark.sql(SDK_RECORD_SQL))
            .cache()
        )
        [*arrow_batches] = records.selectExpr(*record_text_sql())._collect_as_arrow()
        python_records = [
            ArrowRecords(batch).record(i) for batch in arrow_batches for i in range(batch.num_rows)
        ]
        lines: dict[str, list[str]] = {}
        for template in (
            "{{ toJson .Payload.After }}",
            "<{{ .Payload.After | toRawJson }}>",
            '{{ toJson .Key }} {{ toJson .Payload.Before }} {{ index .Metadata "m" }}',
        ):
            record_format = RecordFormat("template", template=template)
            assert source_text_sql(template, missing_key_error=True) is not None, template
            jvm_lines = [r.value for r in record_lines(records, record_format).collect()]
            python_lines = [serializer(record_format)(record) for record in python_records]
            assert len(jvm_lines) == 2 * (len(GO_JSON_VALUES) + len(GO_JSON_CASTS)) + 1
            assert jvm_lines == python_lines, template
            lines[template] = jvm_lines
    finally:
        spark.conf.unset("spark.sql.session.timeZone")
        records.unpersist()
    payloads = lines["{{ toJson .Payload.After }}"]
    assert (
        json.dumps({"z": 3, "é": 4, "\uffff": 1, "😀": 2}, ensure_ascii=False, separators=(",", ":"))
        in payloads
    )
    assert "5e-324" in payloads and "1e+21" in payloads and "1e-7" in payloads and '"NaN"' in payloads


def test_go_json_writes_every_float64_in_gos_shortest_form(spark):
    """Doubles from random bits and every power of two (where a float64's gap below is half the one
    above, so the nearest decimal of a length is not always the one that reads back) give the text of
    the Python writer's Go float formatting."""
    from airflow_conduit.gotemplate.gojson import go_float
    from airflow_conduit.record import GO_JSON_FUNCTION

    randoms = random.Random(21)
    numbers = [struct.unpack("<d", randoms.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(3000)]
    numbers += [math.ldexp(1.0, exponent) for exponent in range(-1074, 1024)]
    numbers += [-math.ldexp(1.0, exponent) * 3 for exponent in range(-1074, 1022, 7)]
    finite = [number for number in numbers if math.isfinite(number)]
    rows = (
        spark.createDataFrame([(number,) for number in finite], "d double")
        .selectExpr(f"{GO_JSON_FUNCTION}(cast(d AS variant), true) AS text")
        .collect()
    )
    assert [row.text for row in rows] == [go_float(number) for number in finite]
