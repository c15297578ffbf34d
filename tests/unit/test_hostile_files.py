"""Hostile and oversized pipeline files are refused before they are expanded or read, with the file, the
line and what to do; files that use anchors as people do still mean what they say."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_conduit.config import ConfigError, load_pipeline_file, load_pipeline_text
from airflow_conduit.config.yaml_source import (
    DEFAULT_MAX_FILE_BYTES,
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_FILE_BYTES_ENV,
)

PIPELINE = """\
version: "2.2"
pipelines:
  - id: orders
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings: &generated
          recordCount: "10"
          format.options.id: int
      - id: gen2
        type: source
        plugin: builtin:generator
        settings: *generated
      - id: out
        type: destination
        plugin: builtin:log
"""


def alias_bomb(levels: int, fan_out: int) -> str:
    """``levels`` of ``fan_out`` aliases each: ``fan_out ** levels`` leaves from a few hundred bytes."""
    lines = ['version: "2.2"', f"l0: &l0 [{', '.join(['x'] * fan_out)}]"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fan_out)}]")
    lines.append(f"pipelines:\n  - id: p\n    description: *l{levels}")
    return "\n".join(lines) + "\n"


def issue_of(error: pytest.ExceptionInfo[ConfigError]) -> tuple[str, int | None, str]:
    [issue] = error.value.issues
    return issue.file, issue.line, issue.message


def test_an_anchor_shared_by_two_connectors_means_the_same_settings():
    pipeline = load_pipeline_text(PIPELINE, "shared.yaml").pipelines[0]
    first, second = (c.settings for c in pipeline.sources)
    assert first == second and first.model_dump(by_alias=True)["recordCount"] == 10


def test_an_alias_bomb_is_refused_at_the_alias_that_crosses_the_bound():
    text = alias_bomb(levels=9, fan_out=9)  # 387 million leaves
    assert len(text) < 1000
    with pytest.raises(ConfigError) as error:
        load_pipeline_text(text, "bomb.yaml")
    file, line, message = issue_of(error)
    assert (file, line) == ("bomb.yaml", 6)  # l4: the first level past the bound
    assert f"more than {MAX_ALIAS_NODES:,} nodes" in message and "fewer aliases" in message


def test_aliases_under_the_bound_are_expanded_and_one_level_more_is_not():
    # Each anchor's copies beyond its first: three levels of nine add 15,670 nodes, four add 141,148.
    with pytest.raises(ConfigError) as error:
        load_pipeline_text(alias_bomb(levels=3, fan_out=9), "fine.yaml")
    # The file is read whole and validated: what is wrong is the pipeline, not the aliases.
    assert all("aliases" not in issue.message for issue in error.value.issues)
    assert any("description must be a string" in issue.message for issue in error.value.issues)
    with pytest.raises(ConfigError, match="aliases expand the document"):
        load_pipeline_text(alias_bomb(levels=4, fan_out=9), "four.yaml")


def test_a_recursive_alias_is_refused():
    text = 'version: "2.2"\nloop: &loop\n  again: *loop\npipelines: []\n'
    with pytest.raises(ConfigError) as error:
        load_pipeline_text(text, "loop.yaml")
    assert issue_of(error)[1:] == (2, "an alias refers to a node that contains it (a recursive document)")


def test_nesting_deeper_than_the_bound_is_refused_not_a_recursion_error():
    text = 'version: "2.2"\nx: ' + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(ConfigError) as error:
        load_pipeline_text(text, "deep.yaml")
    assert issue_of(error)[1:] == (2, f"the document nests more than {MAX_DEPTH} levels deep")


def test_a_file_over_the_limit_is_refused_without_being_read(tmp_path: Path):
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as out:
        out.truncate(64 * 2**30)  # 64 GiB, sparse: reading it would take minutes and all the memory
    with pytest.raises(ConfigError) as error:
        load_pipeline_file(huge)
    file, line, message = issue_of(error)
    assert (file, line) == (str(huge), None)
    assert f"{64 * 2**30:,} bytes, more than the {DEFAULT_MAX_FILE_BYTES:,}" in message
    assert f"raise ${MAX_FILE_BYTES_ENV}" in message


def test_the_limit_is_a_setting(tmp_path: Path):
    path = tmp_path / "shared.yaml"
    path.write_text(PIPELINE)
    size = os.path.getsize(path)
    with pytest.raises(ConfigError, match=f"{size:,} bytes, more than the {size - 1:,}"):
        load_pipeline_file(path, env={MAX_FILE_BYTES_ENV: str(size - 1)})
    assert load_pipeline_file(path, env={MAX_FILE_BYTES_ENV: str(size)}).pipelines[0].id == "orders"
    # Text given directly is held to the same limit.
    with pytest.raises(ConfigError, match="more than the 100 a pipeline file may have"):
        load_pipeline_text(PIPELINE, "inline", env={MAX_FILE_BYTES_ENV: "100"})
    with pytest.raises(ConfigError, match=f"\\${MAX_FILE_BYTES_ENV}: not a number of bytes: 'lots'"):
        load_pipeline_file(path, env={MAX_FILE_BYTES_ENV: "lots"})
