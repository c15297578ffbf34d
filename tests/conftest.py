"""Shared fixtures: one SparkSession for every in-process engine test, and pipeline helpers."""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

ESCAPED_TEXT = "".join(map(chr, range(0x20))) + '"\\/ \x7f é \u2028 \U0001f600'
"""Every character JSON writers escape (the control characters, quote, backslash) and some they do not."""
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# py4j logs at INFO while the interpreter shuts down, after pytest closed its streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def spark():
    from airflow_conduit.engine.session import get_session

    session = get_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pg():
    """A throwaway PostgreSQL cluster (tests/pgcluster.py), started once per session, destroyed after."""
    from pgcluster import start_cluster

    cluster = start_cluster()
    yield cluster
    cluster.destroy()


def read_jsonl(directory: Path) -> list[dict[str, Any]]:
    """The OpenCDC records of a file destination, in delivery order (file name order)."""
    records = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


FILE_DLQ = 'dead-letter-queue: {plugin: builtin:file, settings: {path: "{tmp}/dlq"}, window-size: 0}'
"""A pipeline's dead-letter-queue entry: a file DLQ in ``{tmp}/dlq`` that stops at no nack."""


def run_decoded(
    run_yaml: Callable[..., dict[str, Any]], tmp_path: Path, rows: list[Any], processors: str, dlq: str = ""
) -> dict[str, Any]:
    """Run ``rows`` (JSON lines in ``{tmp}/in/rows.jsonl``) through ``json.decode`` of ``.Payload.After``
    and then ``processors`` (YAML list entries, indented six spaces) into a file destination in
    ``{tmp}/out``; ``dlq``: the pipeline's dead-letter-queue entry, if any."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run_yaml(f"""
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: src, type: source, plugin: builtin:file, settings: {{path: "{{tmp}}/in"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: decode, plugin: json.decode, settings: {{field: .Payload.After}}}}
{processors}
    {dlq}
""")


def text(value: str | None) -> str | None:
    """A raw value (base64 in OpenCDC JSON) as text."""
    return None if value is None else base64.b64decode(value).decode()


@pytest.fixture
def run_yaml(spark, tmp_path) -> Callable[..., dict[str, Any]]:
    """Run the single pipeline of a YAML text until idle; ``{tmp}`` in the text is ``tmp_path``."""
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import RunOptions
    from airflow_conduit.engine.runner import run_pipeline

    def run(yaml_text: str, *, state_dir: Path | None = None, pipeline: str | None = None) -> dict[str, Any]:
        loaded = load_pipeline_text(
            yaml_text.replace("{tmp}", str(tmp_path)), str(tmp_path / "pipeline.yaml")
        )
        config = loaded.get(pipeline) if pipeline else loaded.pipelines[0]
        return run_pipeline(spark, config, state_dir or tmp_path / "state", RunOptions(until_idle=True))

    return run
