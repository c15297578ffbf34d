"""base64.encode / base64.decode on the record dict, checked against the examples in Conduit's processor
reference (``.Key`` raw ``test-key`` -> ``dGVzdC1rZXk=``; ``.Payload.After.foo`` ``bar`` <-> ``YmFy``)
and Conduit's rules for other values."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_conduit.engine.processors import base64_decode, base64_encode
from airflow_conduit.engine.processors._record_fields import RecordError

HAVE: dict[str, Any] = {
    "position": b"test-position",
    "operation": "create",
    "metadata": {"key1": "val1"},
    "key": b"test-key",
    "payload": {"before": None, "after": {"foo": "bar", "n": 2.5, "i": 7, "ok": True, "m": {"x": 1}}},
}


def encoded(field: str) -> dict[str, Any]:
    return base64_encode.make({"field": field})(copy.deepcopy(HAVE))


def test_conduits_examples() -> None:
    assert encoded(".Key")["key"] == b"dGVzdC1rZXk="  # raw data stays raw
    assert encoded(".Payload.After.foo")["payload"]["after"]["foo"] == "YmFy"
    decoded = base64_decode.make({"field": ".Payload.After.foo"})(encoded(".Payload.After.foo"))
    assert decoded == HAVE


def test_numbers_and_bools_are_encoded_as_go_prints_them() -> None:
    after = encoded(".Payload.After.n")["payload"]["after"]
    assert after["n"] == "Mi41"  # "2.5"
    assert encoded(".Payload.After.i")["payload"]["after"]["i"] == "Nw=="  # "7"
    assert encoded(".Payload.After.ok")["payload"]["after"]["ok"] == "dHJ1ZQ=="  # "true"
    assert encoded(".Metadata.key1")["metadata"]["key1"] == "dmFsMQ=="


def test_missing_fields_are_left_alone_and_maps_nack() -> None:
    assert encoded(".Payload.After.nope") == HAVE
    with pytest.raises(RecordError, match=r"unexpected data type map\[string\]interface \{\}"):
        encoded(".Payload.After.m")
    with pytest.raises(RecordError, match="is raw data, not structured"):
        encoded(".Key.inner")


def test_invalid_base64_nacks_with_the_reason() -> None:
    record = copy.deepcopy(HAVE)
    with pytest.raises(RecordError, match="failed to decode the value"):
        base64_decode.make({"field": ".Payload.After.foo"})(record)


def test_decoding_a_whole_data_field_keeps_its_bytes() -> None:
    record = copy.deepcopy(HAVE)
    record["key"] = b"/w=="  # the byte 0xff: not UTF-8
    assert base64_decode.make({"field": ".Key"})(record)["key"] == b"\xff"
