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
