"""The runnable files of the Conduit-syntax corpus (``# runs``, tests/corpus/README.md) run until idle
on the shared SparkSession, and their destinations hold what Conduit documents for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.config import load_pipeline_file
from airflow_conduit.engine.job import RunOptions
from airflow_conduit.engine.runner import run_pipeline
from tests.conftest import read_jsonl
from tests.unit.test_corpus import FILES, corpus_env, header_of

RUNNABLE = [path for path in FILES if header_of(path).runs]


def written(path: Path) -> list[dict[str, Any]]:
    """A file destination's records: the file, or the JSON-lines files of a directory."""
    if path.is_dir():
        return read_jsonl(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def matches(expected: Any, actual: Any, at: str = "") -> None:
    """``actual`` has every key of ``expected`` with its value (``metadata``: a subset)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), (at, expected, actual)
        for key, value in expected.items():
            assert key in actual, (f"{at}.{key} missing", actual)
            matches(value, actual[key], f"{at}.{key}")
    else:
        assert expected == actual, (at, expected, actual)


def test_some_corpus_files_run():
    assert len(RUNNABLE) >= 11


@pytest.mark.spark
@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_conduit_file_runs_as_conduit_documents(spark, path: Path, tmp_path: Path, monkeypatch):
    env = corpus_env(path, tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    loaded = load_pipeline_file(path, env=env)
    payloads = [
        run_pipeline(spark, config, tmp_path / "state", RunOptions(until_idle=True)).get("exit_code")
        for config in loaded.pipelines
        if config.status != "stopped"
    ]
    assert payloads == [expected.pop("exit_code")] * len(payloads)
    for relative, records in expected.items():
        actual = written(tmp_path / relative)
        assert len(actual) == len(records), (relative, actual)
        for i, (want, got) in enumerate(zip(records, actual, strict=True)):
            matches(want, got, f"{relative}[{i}]")
