"""``field.convert`` to ``time``, as Conduit's ``field.convert`` (``pkg/plugin/processor/builtin/impl/field/
convert.go``): the value as text (bytes as they are, a float without exponent, a bool as ``true``/
``false``, anything else as ``fmt`` prints it) is Unix nanoseconds when it is an integer (``strconv.Atoi``),
else RFC 3339 with optional nanoseconds (``time.Parse(time.RFC3339Nano, ...)``). A value that is neither
nacks the record with Go's parse error.

The time is stored as the text Go's ``encoding/json`` writes for a ``time.Time`` (RFC 3339 with
nanoseconds, trailing zeros cut, ``Z`` for UTC), so the OpenCDC JSON a destination writes is Conduit's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.engine.processors import _record_fields as fields
from airflow_conduit.gotemplate.gotime import RFC3339_NANO, GoTime
from airflow_conduit.gotemplate.gotime_parse import TimeParseError, parse_time
from airflow_conduit.gotemplate.values import to_text

_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)


def as_text(value: Any) -> str:
    """Conduit's ``toString`` of the value (for a ``time`` target)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
        return format(Decimal(repr(value)), "f")  # strconv.FormatFloat(v, 'f', -1, 64)
    return to_text(value)  # strings, ints, bools (true/false), nil (<nil>), maps and slices as fmt's %v


def to_time(value: Any) -> GoTime:
    text = as_text(value)
    if _INT.fullmatch(text) and int(text) in _INT64:
        return GoTime(int(text))  # time.Unix(0, n).UTC()
    try:
        return parse_time(RFC3339_NANO, text)
    except TimeParseError as error:
        raise fields.RecordError(str(error)) from None


def make(settings: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ref = parse_field_ref(settings["field"])

    def process(record: dict[str, Any]) -> dict[str, Any]:
        fields.set_value(record, ref, to_time(fields.get(record, ref)).json())
        return record

    return process
