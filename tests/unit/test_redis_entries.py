"""The Redis connector's pure parts: stream ids, and a record's payload as a stream entry."""

from __future__ import annotations

import pytest

from airflow_conduit.engine.connectors.redis_streams.destination import entry_fields
from airflow_conduit.engine.connectors.redis_streams.source import before, parse_id


def test_the_id_before_an_entry_orders_just_below_it() -> None:
    assert before("1700000000000-5") == "1700000000000-4"
    assert before("1700000000000-0") == f"1699999999999-{(1 << 64) - 1}"
    assert before("0-0") == "0-0"
    assert parse_id(before("5-0")) < parse_id("5-0") and parse_id("5-0") < parse_id("5-1")
    assert parse_id("10-0") > parse_id("9-99")  # numerically, not as text


def test_payload_fields_become_entry_fields() -> None:
    assert entry_fields('{"a":"x","n":1,"f":1.5,"b":true,"z":null,"o":{"k":[1]}}', None) == {
        "a": "x",
        "n": "1",
        "f": "1.5",
        "b": "true",
        "z": "",
        "o": '{"k":[1]}',
    }
    assert entry_fields(None, b'{"raw":"json"}') == {"raw": "json"}


@pytest.mark.parametrize(
    ("after_json", "after_raw", "why"),
    [
        (None, None, "payload.after is empty"),
        (None, b"not json", "not JSON"),
        ("[1, 2]", None, "a JSON list, not an object"),
        ("{}", None, "an empty object"),
    ],
)
def test_payloads_that_are_no_entry_say_why(
    after_json: str | None, after_raw: bytes | None, why: str
) -> None:
    result = entry_fields(after_json, after_raw)
    assert isinstance(result, str) and why in result
