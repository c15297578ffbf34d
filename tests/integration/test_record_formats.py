"""``sdk.record.format`` in real pipelines on the shared SparkSession: the file destination writes each
format, the log destination prints the template; and the Spark paths (the JVM's opencdc/json, Arrow for
the others) give the connector SDK's bytes for its test record."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.config.settings.record_format import RecordFormat
from airflow_conduit.engine.connectors.generator import GeneratorSpec
from airflow_conduit.engine.connectors.record_format import record_lines, serializer
from airflow_conduit.engine.processors.custom_python import ArrowRecords
from airflow_conduit.record import record_text_sql
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
