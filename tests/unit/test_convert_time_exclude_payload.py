"""field.convert to ``time`` and field.exclude of ``.Payload``: settings as Conduit validates them, and
the conversion's documented input -> output (Conduit's convert_test.go and convert_examples_test.go)."""

from __future__ import annotations

import pytest

from airflow_conduit.config import ConfigError, load_pipeline_text
from airflow_conduit.config.fieldref import FieldRef, parse_field_list
from airflow_conduit.engine.processors._record_fields import RecordError
from airflow_conduit.engine.processors.field_convert_time import make, to_time


def processor_file(plugin: str, settings: str) -> str:
    return f"""\
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: src, type: source, plugin: builtin:generator}}
      - {{id: dst, type: destination, plugin: builtin:log}}
    processors:
      - {{id: x, plugin: {plugin}, settings: {settings}}}
"""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1704198896123456789, "2024-01-02T12:34:56.123456789Z"),  # examples: int -> time
        (1611254412345678999, "2021-01-21T18:40:12.345678999Z"),  # convert_test.go
        ("2021-01-21T18:40:12.345678999Z", "2021-01-21T18:40:12.345678999Z"),
        ("2021-01-21T18:40:12Z", "2021-01-21T18:40:12Z"),
        ("2021-01-21T18:40:12.100-05:30", "2021-01-21T18:40:12.1-05:30"),
        (b"1000000000", "1970-01-01T00:00:01Z"),
        (1e18, "2001-09-09T01:46:40Z"),  # a JSON number Go decoded as float64: no exponent in its text
    ],
)
def test_convert_to_time(value: object, expected: str) -> None:
    assert to_time(value).json() == expected
    record = {"key": {"id": value}, "payload": {"before": None, "after": None}}
    assert make({"field": ".Key.id", "type": "time"})(record)["key"] == {"id": expected}


@pytest.mark.parametrize(
    ("value", "shown"),
    [("21.01.2021 18:40:12", "21.01.2021 18:40:12"), (None, "<nil>"), (1.5, "1.5"), (True, "true")],
)
def test_what_does_not_convert_nacks_with_gos_message(value: object, shown: str) -> None:
    with pytest.raises(RecordError) as caught:
        to_time(value)
    assert str(caught.value) == (
        f'parsing time "{shown}" as "2006-01-02T15:04:05.999999999Z07:00": cannot parse "{shown}" as "2006"'
    )


def test_time_is_for_key_and_payload_fields() -> None:
    load_pipeline_text(processor_file("field.convert", "{field: .Payload.After.t, type: time}"), "f.yaml")
    with pytest.raises(ConfigError, match="type time converts a .Key or .Payload field"):
        load_pipeline_text(processor_file("field.convert", "{field: .Metadata.t, type: time}"), "f.yaml")
    with pytest.raises(ConfigError, match="time"):
        load_pipeline_text(processor_file("field.convert", "{field: .Key.t, type: date}"), "f.yaml")


def test_exclude_payload_is_before_and_after() -> None:
    assert parse_field_list(".Payload") == (FieldRef("before"), FieldRef("after"))
    assert parse_field_list(".Metadata, .Payload ,.Key.key1") == (
        FieldRef("metadata"),
        FieldRef("before"),
        FieldRef("after"),
        FieldRef("key", ("key1",)),
    )
    load_pipeline_text(processor_file("field.exclude", "{fields: .Payload}"), "f.yaml")
    with pytest.raises(ConfigError, match="cannot exclude .Position"):
        load_pipeline_text(processor_file("field.exclude", '{fields: ".Payload,.Position"}'), "f.yaml")
    with pytest.raises(ConfigError, match=".Payload must be followed by .Before or .After"):
        load_pipeline_text(processor_file("field.exclude", "{fields: .Payload.Middle}"), "f.yaml")
