"""unwrap.debezium and unwrap.kafkaconnect on the record dict: the examples of Conduit's processor
reference, and Conduit's errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_conduit.engine.processors import unwrap_debezium, unwrap_kafkaconnect
from airflow_conduit.engine.processors._record_fields import RecordError

DEBEZIUM_EVENT = {
    "payload": {
        "after": {"description": "test1", "id": 27},
        "before": None,
        "op": "c",
        "source": {"opencdc.readAt": "1674061777225877000", "opencdc.version": "v1"},
        "transaction": None,
        "ts_ms": 1674061777225,
    },
    "schema": {},
}


def debezium_record(event: Any) -> dict[str, Any]:
    return {
        "position": b"test-position",
        "operation": "create",
        "metadata": {"metadata-key": "metadata-value"},
        "key": b'{"payload":"27"}',
        "payload": {"before": None, "after": {"nested": event}},
    }


def test_conduits_debezium_example() -> None:
    unwrapped = unwrap_debezium.make({"field": ".Payload.After.nested"})(
        debezium_record(json.dumps(DEBEZIUM_EVENT, indent=2))
    )
    assert unwrapped == {
        "position": b"test-position",
        "operation": "create",
        "metadata": {
            "metadata-key": "metadata-value",
            "opencdc.readAt": "1674061777225877000",  # the source's wins over ts_ms
            "opencdc.version": "v1",
        },
        "key": b"27",
        "payload": {"before": None, "after": {"description": "test1", "id": 27}},
    }


def test_debezium_metadata_operations_and_errors() -> None:
    event = json.loads(json.dumps(DEBEZIUM_EVENT))
    event["payload"].update(op="r", source={"db": "shop", "n": 2}, extra={"a": {"b": 1.5}})
    unwrapped = unwrap_debezium.make({"field": ".Payload.After.nested"})(debezium_record(event))
    assert unwrapped["operation"] == "snapshot"
    assert unwrapped["metadata"] == {
        "metadata-key": "metadata-value",
        "opencdc.readAt": "1674061777225000000",
        "db": "shop",
        "n": "2",
        "debezium.extra.a.b": "1.5",
    }
    event["payload"]["op"] = "x"
    with pytest.raises(RecordError, match='"x" is an invalid operation'):
        unwrap_debezium.make({"field": ".Payload.After.nested"})(debezium_record(event))
    del event["payload"]["source"]
    with pytest.raises(RecordError, match='the "source" field is missing from debezium payload'):
        unwrap_debezium.make({"field": ".Payload.After.nested"})(debezium_record(event))


def test_conduits_kafkaconnect_example() -> None:
    record = {
        "position": b"test position",
        "operation": "create",
        "metadata": {"metadata-key": "metadata-value"},
        "key": {"payload": {"id": 27}, "schema": {}},
        "payload": {
            "before": None,
            "after": b'{\n"payload": {\n  "description": "test2"\n},\n"schema": {}\n}',
        },
    }
    assert unwrap_kafkaconnect.make({})(record) == {
        "position": b"test position",
        "operation": "create",
        "metadata": {"metadata-key": "metadata-value"},
        "key": {"id": 27},
        "payload": {"before": None, "after": {"description": "test2"}},
    }
    record["payload"]["after"] = b'{"schema": {}}'
    with pytest.raises(RecordError, match="doesn't contain a payload field"):
        unwrap_kafkaconnect.make({})(record)
