"""The metrics file of a real run: Prometheus text whose counters are the exit payload's."""

from __future__ import annotations

import stat

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.spark

PIPELINE = """
version: "2.2"
pipelines:
  - id: metered
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 120, maxRecordsPerBatch: 40}}
      - {id: all, type: destination, plugin: builtin:file, settings: {path: "{tmp}/all"}}
      - id: evens
        type: destination
        plugin: builtin:file
        settings: {path: "{tmp}/evens"}
        processors:
          - {id: odd-out, plugin: filter, condition: "CAST(.Key AS INT) % 2 = 1"}
    processors:
      - id: reject
        plugin: error
        condition: "CAST(.Key AS INT) % 25 = 7"
        settings: {message: "rejected for the metrics test"}
    dead-letter-queue:
      plugin: builtin:log
      window-size: 0
"""


def families(path):
    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


def value(family, **labels):
    matches = [s.value for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (family.name, labels, family.samples)
    return matches[0]


def test_metrics_file_matches_the_exit_payload(run_yaml, tmp_path):
    payload = run_yaml(PIPELINE)
    assert payload["exit_code"] == 0, payload
    records = payload["records"]
    assert records["dlq"] > 0 and len(records["written"]) == 2  # the run exercised what is measured

    path = tmp_path / "state" / "metered" / "metrics.prom"
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044  # readable by a node_exporter user
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(".metrics.prom")]
    metrics = families(path)

    status = metrics["conduit_pipeline_status"]
    assert value(status, pipeline_name="metered", status="stopped") == 1
    assert sum(s.value for s in status.samples) == 1

    # prometheus_client names a counter family without its _total suffix.
    counted = metrics["conduit_pipeline_records"]
    assert counted.type == "counter"
    for state in ("read", "acked", "filtered", "nacked", "dlq"):
        assert value(counted, pipeline_name="metered", state=state) == records[state], state

    written = metrics["conduit_connector_records"]
    assert {s.labels["connector"]: s.value for s in written.samples if s.name.endswith("_total")} == {
        k: float(v) for k, v in records["written"].items()
    }
    assert {s.labels["plugin"] for s in written.samples} == {"builtin:file"}

    dlq = metrics["conduit_dlq_records"]
    assert value(dlq, pipeline_name="metered", plugin="builtin:log") == records["dlq"]
    dlq_bytes = metrics["conduit_dlq_bytes"]
    assert dlq_bytes.type == "histogram"
    count = value(dlq_bytes, plugin="builtin:log", le="+Inf")
    assert count == records["dlq"]
    lines = [
        line
        for f in sorted((tmp_path / "state" / "metered" / "dlq").glob("*.jsonl"))
        for line in f.read_bytes().splitlines()
    ]
    assert [s.value for s in dlq_bytes.samples if s.name == "conduit_dlq_bytes_sum"] == [
        sum(len(line) for line in lines)
    ]

    # Bytes each file destination published, and one duration per batch for each destination.
    published = metrics["conduit_connector_bytes"]
    for name in ("all", "evens"):
        on_disk = sum(f.stat().st_size for f in (tmp_path / name).glob("*.jsonl"))
        assert on_disk > 0
        assert value(published, connector=f"metered:{name}") == on_disk
        spent = metrics["conduit_connector_execution_duration_seconds"]
        assert value(spent, connector=f"metered:{name}", le="+Inf") == payload["batches"]

    assert value(metrics["conduit_pipeline_batches"], pipeline_name="metered") == payload["batches"]
    batch_seconds = metrics["conduit_pipeline_execution_duration_seconds"]
    assert value(batch_seconds, le="+Inf") == payload["batches"]

    # From Spark's listener: every row Spark read, which is every record the pipeline read.
    source_rows = metrics["conduit_spark_source_rows"]
    assert sum(s.value for s in source_rows.samples if s.name.endswith("_total")) == records["read"]
    phases = metrics["conduit_spark_batch_phase_duration_seconds"]
    assert value(phases, phase="triggerExecution", le="+Inf") >= payload["batches"]
    assert value(metrics["conduit_pipeline_last_batch_id"], pipeline_name="metered") >= payload["batches"] - 1


def test_the_listener_is_removed_and_a_degraded_run_says_so(run_yaml, spark, tmp_path):
    listeners_before = len(spark._jsparkSession.streams().listListeners())
    payload = run_yaml(PIPELINE.replace("      window-size: 0\n", "      window-size: 1\n"))
    assert payload["status"] == "degraded", payload
    assert len(spark._jsparkSession.streams().listListeners()) == listeners_before

    metrics = families(tmp_path / "state" / "metered" / "metrics.prom")
    assert value(metrics["conduit_pipeline_status"], status="degraded") == 1
    assert value(metrics["conduit_pipeline_status"], status="running") == 0
    counted = metrics["conduit_pipeline_records"]
    assert value(counted, state="read") == payload["records"]["read"]
    assert value(metrics["conduit_dlq_records"], plugin="builtin:log") == payload["records"]["dlq"]
