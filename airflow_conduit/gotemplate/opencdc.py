"""The OpenCDC record as a Go template sees it: Conduit hands its templates an ``opencdc.Record`` struct
(``.Position``, ``.Operation``, ``.Metadata``, ``.Key``, ``.Payload.Before``, ``.Payload.After``) (pure Python).

Structured data is a ``map[string]interface{}`` (a missing field prints as ``<no value>``), raw data is
``opencdc.RawData`` (a field of it cannot be evaluated), metadata is a ``map[string]string`` (a missing
key is ``""``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .gojson import Fields
from .values import Operation, Position, RawData, StringMap, Struct


@dataclass(frozen=True)
class Change(Struct):
    FIELDS: ClassVar[tuple[str, ...]] = ("Before", "After")
    Before: Any
    After: Any


@dataclass(frozen=True)
class Record(Struct):
    FIELDS: ClassVar[tuple[str, ...]] = ("Position", "Operation", "Metadata", "Key", "Payload")
    UNEXPORTED: ClassVar[int] = 1  # its serializer: ``{{ . }}`` prints it as <nil>
    Position: Position
    Operation: Operation
    Metadata: StringMap
    Key: Any
    Payload: Change

    def json_value(self) -> dict[str, Any]:
        """The record as OpenCDC JSON (what ``toJson .`` prints): bytes as base64, as Go encodes them;
        the fields in the struct's order (:class:`~.gojson.Fields`)."""
        return Fields(
            position=_json_data(bytes(self.Position)),
            operation=str(self.Operation),
            metadata=dict(self.Metadata),
            key=_json_data(self.Key),
            payload=Fields(before=_json_data(self.Payload.Before), after=_json_data(self.Payload.After)),
        )


def _json_data(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def from_record_dict(record: Mapping[str, Any]) -> Record:
    """The template's view of the record dict Python processors get (structured data as dicts, raw data
    as bytes)."""
    payload = record.get("payload") or {}
    return Record(
        Position=Position(record.get("position") or b""),
        Operation=Operation.named(record.get("operation") or "create"),
        Metadata=StringMap(record.get("metadata") or {}),
        Key=_view(record.get("key")),
        Payload=Change(Before=_view(payload.get("before")), After=_view(payload.get("after"))),
    )


def _view(value: Any) -> Any:
    return RawData(value) if isinstance(value, bytes | bytearray) else value
