"""The OpenCDC record as a Go template sees it: Conduit hands its templates an ``opencdc.Record`` struct
(``.Position``, ``.Operation``, ``.Metadata``, ``.Key``, ``.Payload.Before``, ``.Payload.After``) (pure Python).

Structured data is a ``map[string]interface{}`` (a missing field prints as ``<no value>``), raw data is
``opencdc.RawData`` (a field of it cannot be evaluated), metadata is a ``map[string]string`` (a missing
key is ``""``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .values import Operation, Position, RawData, StringMap, Struct


@dataclass(frozen=True)
class Change(Struct):
    FIELDS: ClassVar[tuple[str, ...]] = ("Before", "After")
    Before: Any
    After: Any


@dataclass(frozen=True)
class Record(Struct):
    FIELDS: ClassVar[tuple[str, ...]] = ("Position", "Operation", "Metadata", "Key", "Payload")
    Position: Position
    Operation: Operation
    Metadata: StringMap
    Key: Any
    Payload: Change


def data(structured: Mapping[str, Any] | None, raw: bytes | None) -> Any:
    """One of a record's data values: the structured one when set, else the raw one, else nil."""
    if structured is not None:
        return dict(structured)
    if raw is not None:
        return RawData(raw)
    return None


def record(
    *,
    position: bytes | None,
    operation: str,
    metadata: Mapping[str, str] | None,
    key: Any,
    before: Any = None,
    after: Any,
) -> Record:
    """A record from its parts (``key``/``before``/``after`` as :func:`data` makes them)."""
    return Record(
        Position=Position(position or b""),
        Operation=Operation.named(operation),
        Metadata=StringMap(metadata or {}),
        Key=key,
        Payload=Change(Before=before, After=after),
    )
