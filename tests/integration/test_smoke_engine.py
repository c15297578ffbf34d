"""The engine end to end in-process: generator -> processors -> file, with the DLQ."""

from __future__ import annotations

import pyspark

from tests.conftest import read_jsonl, text

PIPELINE = """
version: "2.2"
pipelines:
  - id: orders
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings: {recordCount: 3000, maxRecordsPerBatch: 700, collections: "orders,refunds"}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
    processors:
      - {id: tag, plugin: field.set, settings: {field: .Metadata.env, value: prod}}
      - {id: boom, plugin: error, condition: ".Key = '17' OR .Key = '2500'", settings: {message: bad}}
    dead-letter-queue: {plugin: builtin:file, settings: {path: "{tmp}/dlq"}, window-size: 0}
"""


def test_python_and_jvm_spark_agree(spark):
    """pyspark and pyspark-client share one package: a version mismatch breaks every Python UDF."""
    assert pyspark.__version__ == spark.version


def test_generator_to_file_in_order_over_many_batches(run_yaml, tmp_path):
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    assert payload["batches"] == 5  # 3000 records, at most 700 per micro-batch
    assert payload["records"] == {
        "read": 3000,
        "acked": 2998,
        "filtered": 0,
        "nacked": 2,
        "dlq": 2,
        "written": {"orders:out": 2998},
    }
    records = read_jsonl(tmp_path / "out")
    keys = [int(text(r["key"])) for r in records]
    assert keys == [k for k in range(3000) if k not in (17, 2500)]
    assert {r["metadata"]["env"] for r in records} == {"prod"}
    assert records[0]["metadata"]["conduit.source.connector.id"] == "orders:gen"
    dlq = read_jsonl(tmp_path / "dlq")
    assert [text(r["position"]) for r in dlq] == ["17", "2500"]
    assert dlq[0]["metadata"]["conduit.dlq.nack.error"] == "bad"
    assert dlq[0]["metadata"]["conduit.dlq.nack.node.id"] == "orders:boom"
    assert text(dlq[0]["payload"]["after"]["key"]) == "17"
