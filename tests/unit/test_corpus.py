"""Every pipeline file of the Conduit-syntax corpus (tests/corpus/README.md) loads unchanged, with
exactly the warnings its header names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from airflow_conduit.config import load_pipeline_file

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
FILES = sorted(CORPUS.glob("*.yaml"))


@dataclass
class Header:
    warns: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    runs: bool = False


def header_of(path: Path) -> Header:
    header = Header()
    for line in path.read_text().splitlines():
        if match := re.match(r"#\s*warns:\s*(.+)", line):
            header.warns.append(match.group(1).strip())
        elif match := re.match(r"#\s*env:\s*([A-Za-z_][A-Za-z0-9_]*)=(.*)", line):
            header.env[match.group(1)] = match.group(2).strip()
        elif re.match(r"#\s*runs\s*$", line):
            header.runs = True
    return header


def corpus_env(path: Path, tmp: Path) -> dict[str, str]:
    return {**header_of(path).env, "CORPUS_TMP": str(tmp), "CORPUS_DIR": str(CORPUS)}


def test_the_corpus_is_not_empty():
    assert len(FILES) >= 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_conduit_file_loads_with_its_warnings(path: Path, tmp_path: Path):
    loaded = load_pipeline_file(path, env=corpus_env(path, tmp_path))
    assert loaded.pipelines
    warnings = [str(w) for w in loaded.warnings]
    expected = header_of(path).warns
    for text in expected:
        assert any(text in w for w in warnings), (text, warnings)
    unexpected = [w for w in warnings if not any(text in w for text in expected)]
    assert not unexpected, unexpected
