"""What ``unwrap.debezium`` and ``unwrap.kafkaconnect`` share: reading the wrapped event from its field
(structured, or JSON as text or raw data) and unwrapping a Kafka Connect key (``{"payload": ...}``)."""

from __future__ import annotations

import json
from typing import Any

from airflow_conduit.engine.processors._record_fields import RecordError
from airflow_conduit.gotemplate.values import go_type, to_text


def event(value: Any, *, only_structured_hint: bool = False) -> dict[str, Any]:
    """The wrapped event as a dict; :class:`RecordError` as Conduit words it."""
    if isinstance(value, dict):
        return value
    if isinstance(value, bytes | bytearray | str):
        source = "string" if isinstance(value, str) else "raw data"
        try:
            decoded = json.loads(value)
        except (ValueError, UnicodeDecodeError) as error:
            raise RecordError(f"failed unmarshalling JSON from {source}: {error}") from None
        if not isinstance(decoded, dict):
            raise RecordError(f"failed unmarshalling JSON from {source}: not an object")
        return decoded
    hint = " (only structured data is supported)" if only_structured_hint else ""
    raise RecordError(f"unexpected data type {go_type(value)}{hint}")


def key(value: Any) -> Any:
    """A Kafka Connect key's ``payload``: structured stays structured, anything else becomes its text as raw
    data; a key without one is kept."""
    structured: Any = value
    if isinstance(value, bytes | bytearray):
        try:
            structured = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            return value
    if not isinstance(structured, dict) or "payload" not in structured:
        return value
    payload = structured["payload"]
    if isinstance(payload, dict):
        return payload
    return to_text(payload).encode()
