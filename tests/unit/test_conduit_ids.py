"""Conduit's id alphabet (letters, digits, ``_ - : .``; pipeline ids up to 128 characters, a connector's
``pipeline:connector`` id up to 256) and the one escape that turns ids into file names."""

from __future__ import annotations

import pytest

from airflow_conduit.assets import dlq_uri
from airflow_conduit.config import ConfigError, load_pipeline_text
from airflow_conduit.state import PipelineState, id_of_segment, path_segment


def pipeline_file(pipeline_id: str, source_id: str = "src", processor_id: str = "proc") -> str:
    return f"""\
version: "2.2"
pipelines:
  - id: "{pipeline_id}"
    connectors:
      - {{id: "{source_id}", type: source, plugin: builtin:generator}}
      - {{id: dst, type: destination, plugin: builtin:log}}
    processors:
      - {{id: "{processor_id}", plugin: filter}}
"""


def messages(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_pipeline_text(text, "ids.yaml")
    return [f"{issue.field_path}: {issue.message}" for issue in caught.value.issues]


@pytest.mark.parametrize(
    "pipeline_id", ["orders:v2", "_private", "-x", ":lead", "a.b", "...", "x" * 128, "pg.orders_v2-1:x"]
)
def test_conduit_ids_load_and_keep_their_spelling(pipeline_id: str) -> None:
    [config] = load_pipeline_text(pipeline_file(pipeline_id, "pg:source", "p:1"), "ids.yaml").pipelines
    assert config.id == pipeline_id
    assert config.connectors[0].id == "pg:source"
    assert config.connectors[0].node_id == f"{pipeline_id}:pg:source"
    assert config.processors[0].node_id == f"{pipeline_id}:p:1"


@pytest.mark.parametrize("bad", ["a/b", "a\\\\b", "a b", "é", "a~b", "x%y"])
def test_characters_conduit_refuses_are_refused(bad: str) -> None:
    [message] = messages(pipeline_file(bad))
    assert message.startswith("pipelines[0].id: invalid id")


@pytest.mark.parametrize("bad", [".", ".."])
def test_dot_ids_would_name_the_state_dir_or_its_parent(bad: str) -> None:
    assert messages(pipeline_file("p", source_id=bad)) == [
        f"pipelines[0].connectors[0].id: invalid id {bad!r}: it would name a directory of the state dir"
    ]


def test_length_limits_are_conduits() -> None:
    [message] = messages(pipeline_file("x" * 129))
    assert message.startswith("pipelines[0].id: pipeline id") and "longer than 128" in message
    # 128 + ':' + 127 = 256 is allowed, one more is not
    load_pipeline_text(pipeline_file("x" * 128, source_id="s" * 127), "ids.yaml")
    [message] = messages(pipeline_file("x" * 128, source_id="s" * 128))
    assert message.startswith("pipelines[0].connectors[0].id: connector id") and "longer than 256" in message


@pytest.mark.parametrize("conduit_id", ["orders:v2", "a:b:c", "plain", "_x", "a.b-c_d"])
def test_path_segment_is_reversible_and_has_no_colon(conduit_id: str) -> None:
    segment = path_segment(conduit_id)
    assert ":" not in segment and "/" not in segment
    assert id_of_segment(segment) == conduit_id


def test_ids_without_colon_keep_their_state_dirs(tmp_path) -> None:
    assert PipelineState.of(tmp_path, "orders-v1").root == tmp_path / "orders-v1"
    assert PipelineState.of(tmp_path, "orders:v2").root == tmp_path / "orders~v2"
    assert path_segment("a:b") != path_segment("a_b") != path_segment("a.b")


def test_dlq_asset_uri_of_a_colon_id_names_no_port() -> None:
    assert dlq_uri("orders:v2") == "conduit://orders~v2/dlq"
    assert dlq_uri("orders") == "conduit://orders/dlq"


@pytest.mark.parametrize("pipeline_id", ["_staging", "-x", ":v2", "a.b"])
def test_every_id_conduit_accepts_names_a_dlq_asset_airflow_takes(pipeline_id: str) -> None:
    from urllib.parse import urlsplit

    from airflow_conduit.assets import dlq_asset, sanitize_uri

    uri = dlq_asset(pipeline_id).uri
    assert sanitize_uri(urlsplit(uri)).geturl() == uri  # what Airflow calls on the asset's URI


@pytest.mark.parametrize("host", [".", "..", "a/b"])
def test_a_dlq_uri_that_is_no_conduit_id_is_refused(host: str) -> None:
    from urllib.parse import urlsplit

    from airflow_conduit.assets import sanitize_uri

    with pytest.raises(ValueError):
        sanitize_uri(urlsplit(f"conduit://{host}/dlq"))
