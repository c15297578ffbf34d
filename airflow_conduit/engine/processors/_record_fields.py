"""Conduit field references (:class:`~airflow_conduit.config.fieldref.FieldRef`) read and written on the
record dict that Python processors get (``{position, operation, metadata, key, payload: {before, after}}``,
structured data as dicts, raw data as bytes), with the rules of Conduit's reference resolver: writing a
field below structured data creates its parents; a field below raw data cannot be read or written; a
data field set to a string or bytes becomes raw data.
"""

from __future__ import annotations

from typing import Any

from airflow_conduit.config.fieldref import FieldRef


class RecordError(ValueError):
    """A builtin Python processor cannot process this record: it is nacked with this message."""


class FieldError(RecordError):
    """The reference cannot be read or written on this record."""


def _data_holder(record: dict[str, Any], root: str) -> tuple[dict[str, Any], str]:
    if root == "key":
        return record, "key"
    return record.setdefault("payload", {}), root


def get(record: dict[str, Any], ref: FieldRef) -> Any:
    """The value at ``ref`` (``None`` when a field is missing)."""
    if ref.root in ("position", "operation"):
        return record.get(ref.root)
    if ref.root == "metadata":
        metadata = record.get("metadata") or {}
        return metadata.get(ref.path[0], "") if ref.path else metadata
    holder, name = _data_holder(record, ref.root)
    value = holder.get(name)
    for depth, segment in enumerate(ref.path):
        if isinstance(value, bytes | bytearray):
            raise FieldError(f"could not get {ref}: {_prefix(ref, depth)} is raw data, not structured")
        if not isinstance(value, dict):
            return None
        value = value.get(segment)
    return value


def set_value(record: dict[str, Any], ref: FieldRef, value: Any) -> None:
    """Write ``value`` at ``ref``."""
    if ref.root == "position":
        raise FieldError("cannot set .Position")
    if ref.root == "operation":
        record["operation"] = str(value)
        return
    if ref.root == "metadata":
        if not ref.path:
            raise FieldError("cannot set .Metadata as a whole here")
        record.setdefault("metadata", {})[ref.path[0]] = str(value)
        return
    holder, name = _data_holder(record, ref.root)
    if not ref.path:
        holder[name] = value.encode() if isinstance(value, str) else value
        return
    parent = holder.get(name)
    if isinstance(parent, bytes | bytearray):
        raise FieldError(f"could not set {ref}: {_prefix(ref, 0)} is raw data, not structured")
    if parent is None:
        parent = holder[name] = {}
    for depth, segment in enumerate(ref.path[:-1]):
        child = parent.get(segment)
        if not isinstance(child, dict):
            if child is not None:
                raise FieldError(f"could not set {ref}: {_prefix(ref, depth + 1)} is not a map")
            child = parent[segment] = {}
        parent = child
    parent[ref.path[-1]] = value


def _prefix(ref: FieldRef, depth: int) -> str:
    return str(FieldRef(ref.root, ref.path[:depth]))
