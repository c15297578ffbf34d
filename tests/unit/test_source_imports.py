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
