"""``builtin:file`` micro-batches read by the engine's Java reader from the batch's offsets
(``file.read_batch``): the same records as the Python stream reader, and counted in the metrics."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_conduit.config.settings import FileSourceSettings
from airflow_conduit.engine.connectors import file as file_source
from airflow_conduit.engine.connectors._stream import SourceContext
from tests.conftest import read_jsonl
from tests.integration.test_metrics import families, value

LINES = [
    '{"id": 1}',
    "",  # an empty line is a record too
    '{"id": 2, "text": "caf\u00e9 \u2603"}\r',  # a carriage return before the newline is not part of it
    "no json at all\r\r",  # only the last one is dropped
    '{"id": 3, "big": "' + "x" * (5 << 20) + '"}',  # longer than a 4 MB block
    '{"id": 4}',
]


def python_rows(source: file_source.FileStreamReader, start: dict, end: dict) -> list[dict]:
    return [
        row
        for part in source.partitions(start, end)
        for chunk in source.read(part)
        for row in chunk.to_pylist()
    ]


def test_the_java_reader_reads_what_the_python_reader_reads(spark, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(file_source, "MIN_PARTITION_BYTES", 1000)  # several ranges per file
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes("".join(line + "\n" for line in LINES).encode())
    # A name that is not ASCII, with a tab: each position starts with it as the Python reader writes it.
    (folder / "b\t\u00e9.jsonl").write_bytes(
        b"".join(b'{"n": %d}\n' % i for i in range(5000)) + b'{"partial": '
    )
    settings = FileSourceSettings.model_validate({"path": str(folder), "maxRecordsPerBatch": 2000})
    ctx = SourceContext("src", "p:src", str(tmp_path / "stop"), 2)
    reader = file_source.stream_reader(settings, ctx)

    start = reader.initialOffset()
    batches = 0
    while True:
        end = json.loads(json.dumps(reader.latestOffset(start, reader.getDefaultReadLimit())))
        if end == start:
            break
        expected = python_rows(reader, start, end)
        read = file_source.read_batch(spark, settings, ctx, start, end)
        rows = [row.asDict() for row in read.collect()]
        assert [{**r, "metadata": dict(r["metadata"])} for r in rows] == [
            {**r, "metadata": dict(r["metadata"])} for r in expected
        ]
        assert file_source.records_between(start, end) == len(rows) > 0
        start, batches = end, batches + 1
    assert batches >= 3  # the second file starts mid-way through a batch, and is read in pieces


def test_a_file_pipeline_counts_the_rows_it_read_itself_in_the_metrics(run_yaml, tmp_path: Path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "events.jsonl").write_text("".join(json.dumps({"i": i}) + "\n" for i in range(250)))
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: counted
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{folder}", maxRecordsPerBatch: 100}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{tmp_path}/out"}}}}
""")
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["read"] == 250 and payload["batches"] == 3
    metrics = families(tmp_path / "state" / "counted" / "metrics.prom")
    rows = metrics["conduit_spark_source_rows"]
    assert value(rows, source="counted:in") == 250
    # Spark's own stream never computed the file source's rows (the engine read them).
    assert sum(s.value for s in rows.samples if s.name.endswith("_total")) == 250


def test_the_file_sources_own_metadata_and_a_streamed_sources_are_as_before(run_yaml, tmp_path: Path):
    """The file source's records get the standard metadata with their ``file.path`` as one constant
    map per range; a source Spark's stream reads (the generator) gets it merged in: both kinds in one
    pipeline, each with exactly its own entries, in order."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: mixed
    connectors:
      - {{id: f, type: source, plugin: builtin:file, settings: {{path: "{folder}"}}}}
      - {{id: g, type: source, plugin: builtin:generator, settings: {{recordCount: 2, format.type: structured, format.options.id: int}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{tmp_path}/out"}}}}
""")
    assert payload["exit_code"] == 0, payload
    lines = read_jsonl(tmp_path / "out")
    keys = sorted(tuple(line["metadata"]) for line in lines)
    assert keys == [
        ("file.path", "opencdc.readAt", "conduit.source.connector.id"),
        ("file.path", "opencdc.readAt", "conduit.source.connector.id"),
        ("opencdc.readAt", "conduit.source.connector.id"),
        ("opencdc.readAt", "conduit.source.connector.id"),
    ]
    by_source = {line["metadata"]["conduit.source.connector.id"] for line in lines}
    assert by_source == {"mixed:f", "mixed:g"}
    assert {line["metadata"].get("file.path") for line in lines} == {str(folder / "a.jsonl"), None}
