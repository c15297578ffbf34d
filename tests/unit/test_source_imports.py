"""Spark starts a Python process for each Python source at every query start, and it imports the
source's module: that import must stay light (a heavy one cost 0.2-0.3 s per query start)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "airflow_conduit.config.loader",
    "airflow_conduit.engine.processors",
    "pydantic",
    "sqlglot",
    "psycopg",
)


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("airflow_conduit.engine.connectors.file", ()),
        ("airflow_conduit.engine.connectors.generator", ()),
        ("airflow_conduit.engine.connectors.postgres.source", ("psycopg",)),
    ],
)
def test_a_source_module_does_not_import_the_engine(module: str, allowed: tuple[str, ...]) -> None:
    code = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    loaded = set(
        json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
    )
    heavy = {name for name in HEAVY if name in loaded and name not in allowed}
    assert not heavy, f"{module} imports {sorted(heavy)}"


def test_reading_file_lines_does_not_import_pandas(tmp_path) -> None:
    """pyarrow imports pandas on the first ``pa.array`` or ``pa.scalar``: about 36 MiB more in each of
    Spark's Python workers that read a file source (measured in ``benchmarks/peers.py``)."""
    source = tmp_path / "lines.jsonl"
    source.write_bytes(b'{"a": 1}\n{"a": 2}\r\n{"a": 3}\n')
    code = (
        "import sys, json\n"
        "from airflow_conduit.engine.connectors.file import lines_to_batches\n"
        f"data = open({str(source)!r}, 'rb').read()\n"
        "batches = list(lines_to_batches(data, 'lines.jsonl', 0, 1, '/in/lines.jsonl'))\n"
        "print(json.dumps({'rows': sum(b.num_rows for b in batches), 'pandas': 'pandas' in sys.modules}))"
    )
    result = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
    assert result == {"rows": 3, "pandas": False}


def test_writing_records_in_a_template_format_does_not_import_pandas(tmp_path) -> None:
    """The same in the workers that render a destination's ``sdk.record.format``: Spark reuses them to
    read, so pandas there was in every worker (4 × 30-40 MiB, measured in ``benchmarks/peers.py``)."""
    import pyarrow as pa

    from airflow_conduit.record import DATA_FIELDS

    # The mapper's input: the record's columns with each data field as JSON text (record_text_sql).
    types = {"position": pa.binary(), "operation": pa.string(), "metadata": pa.map_(pa.string(), pa.string())}
    for field in DATA_FIELDS:
        types |= {f"{field}_json": pa.string(), f"{field}_raw": pa.binary()}
    values = {
        "position": [b"p1", b"p2"],
        "operation": ["create", "create"],
        "metadata": [[("k", "v")], []],
        "after_json": ['{"b":1,"a":"<x>"}', '{"n":2.5}'],
    }
    records = pa.RecordBatch.from_pydict(
        {name: values.get(name, [None, None]) for name in types}, schema=pa.schema(list(types.items()))
    )
    batch_file = tmp_path / "records.arrow"
    with pa.ipc.new_file(str(batch_file), records.schema) as writer:
        writer.write_batch(records)
    code = (
        "import sys, json\n"
        "import pyarrow as pa\n"
        "from airflow_conduit.config.settings.record_format import RecordFormat\n"
        "from airflow_conduit.engine.connectors.record_format import _mapper\n"
        f"batch = pa.ipc.open_file({str(batch_file)!r}).get_batch(0)\n"
        "render = _mapper(RecordFormat('template', '{{ toJson .Payload.After }}'))\n"
        "lines = [line for out in render(iter([batch])) for line in out.column(0).to_pylist()]\n"
        "print(json.dumps({'lines': lines, 'pandas': 'pandas' in sys.modules}))"
    )
    result = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
    # Go's json.Marshal: keys sorted, HTML characters escaped.
    assert result == {"lines": ['{"a":"\\u003cx\\u003e","b":1}', '{"n":2.5}'], "pandas": False}
