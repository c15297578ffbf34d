"""unwrap.opencdc on the record dict: Conduit's documented example (a record stored structured in
``.Payload.After``, as the OpenCDC JSON of that example), the same record stored as JSON raw data with
base64 data, and Conduit's errors."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from airflow_conduit.engine.processors._record_fields import RecordError
from airflow_conduit.engine.processors.unwrap_opencdc import make

STORED: dict[str, Any] = {
    "position": "dGVzdC1wb3NpdGlvbg==",
    "operation": "update",
    "metadata": {},
    "key": {"id": "test-key"},
    "payload": {
        "before": None,
        "after": {
            "msg": "string 0e8955b3-7fb5-4dda-8064-e10dc007f00d",
            "sensor_id": 1250383582,
            "triggered": False,
        },
    },
}


def wrapping(after: Any) -> dict[str, Any]:
    return {
        "position": b"wrapping position",
        "operation": "create",
        "metadata": {"kept": "no"},
        "key": b"wrapping key",
        "payload": {"before": None, "after": after},
    }


def test_conduits_example() -> None:
    assert make({})(wrapping(STORED)) == {
        "position": b"wrapping position",
        "operation": "update",
        "metadata": {},
        "key": {"id": "test-key"},
        "payload": {"before": None, "after": STORED["payload"]["after"]},
    }


def test_a_record_stored_as_json_with_raw_data_and_metadata_values_as_text() -> None:
    stored = {**STORED, "key": base64.b64encode(b"k-1").decode(), "metadata": {"n": 3, "s": "x"}}
    unwrapped = make({"field": ".Payload.After"})(wrapping(json.dumps(stored).encode()))
    assert unwrapped["key"] == b"k-1" and unwrapped["metadata"] == {"n": "3", "s": "x"}


@pytest.mark.parametrize(
    ("after", "message"),
    [
        (None, "field to unmarshal is nil"),
        (b"not json", "failed to unmarshal raw data as JSON"),
        ({**STORED, "operation": "upsert"}, 'invalid operation "upsert"'),
        ({k: v for k, v in STORED.items() if k != "payload"}, "no payload"),
        ({**STORED, "key": "%%%"}, "couldn't decode payload"),
    ],
)
def test_what_conduit_refuses_nacks(after: Any, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        make({})(wrapping(after))
