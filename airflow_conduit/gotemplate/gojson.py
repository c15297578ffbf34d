"""JSON as Go's ``encoding/json`` writes it (pure Python): what Sprig's ``toJson`` and the connector SDK's
record formats print, byte for byte.

- a map's keys sorted, a struct's fields (:class:`Fields`) in declaration order;
- ``[]byte`` as base64;
- a float64 in the shortest form that reads back, without ``.0`` (``2``), in exponent form below 1e-6 or
  from 1e21 (``1e+21``, ``1e-7``);
- ``<``, ``>``, ``&``, U+2028 and U+2029 escaped (``\\u003c``) unless ``escape_html=False``
  (``toRawJson``).
"""

from __future__ import annotations

import base64
import json
import math
import re
from decimal import Decimal
from typing import Any

from .gotime import GoTime
from .values import NO_VALUE, Operation

_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_HTML_CHARS = re.compile("[<>&\u2028\u2029]")
_LINE_SEPARATORS = re.compile("[\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class Fields(dict[str, Any]):
    """A Go struct as JSON: its fields in declaration order (a plain ``dict`` is a map: keys sorted)."""


def go_json(value: Any, *, escape_html: bool = True) -> str:
    """``json.Marshal(value)``; ``ValueError`` for NaN and infinities, which Go refuses too."""
    out: list[str] = []
    _encode(value, out, escape_html)
    return "".join(out)


def go_float(value: float) -> str:
    """A float64 as ``encoding/json`` writes it."""
    if not math.isfinite(value):
        raise ValueError(f"json: unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    # Python's repr is the shortest text that reads back as the value, as Go's -1 precision is.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    power = len(digits) + int(exponent) - 1  # value = D.DDD x 10^power
    if 1e-6 <= abs(value) < 1e21:
        if exponent >= 0:  # type: ignore[operator]
            return sign + digits + "0" * int(exponent)
        point = len(digits) + int(exponent)
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    # strconv writes at least two exponent digits; encoding/json then drops the 0 of e-07.
    shown = f"{abs(power):02d}" if power >= 0 else str(-power)
    return f"{sign}{mantissa}e{'-' if power < 0 else '+'}{shown}"


def _string(text: str, escape_html: bool) -> str:
    if not text.isascii() and _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)  # Go writes invalid UTF-8 as U+FFFD
    encoded = json.dumps(text, ensure_ascii=False)
    pattern = _HTML_CHARS if escape_html else _LINE_SEPARATORS
    return pattern.sub(lambda m: _HTML[m.group()], encoded)


def _encode(value: Any, out: list[str], html: bool) -> None:
    if value is None or value is NO_VALUE:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, Operation):
        out.append(_string(str(value), html))  # opencdc.Operation marshals as its name
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(go_float(value))
    elif isinstance(value, str):
        out.append(_string(value, html))
    elif isinstance(value, bytes | bytearray):
        out.append('"' + base64.b64encode(value).decode() + '"')
    elif isinstance(value, GoTime):
        out.append(_string(value.json(), html))  # time.Time's MarshalJSON: RFC 3339 with nanoseconds
    elif hasattr(value, "json_value"):  # a record: its OpenCDC JSON
        _encode(value.json_value(), out, html)
    elif isinstance(value, dict):
        items = (
            value.items() if isinstance(value, Fields) else sorted(value.items(), key=lambda kv: str(kv[0]))
        )
        out.append("{")
        for i, (key, item) in enumerate(items):
            if i:
                out.append(",")
            out.append(_string(str(key), html))
            out.append(":")
            _encode(item, out, html)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out, html)
        out.append("]")
    else:
        out.append(_string(str(value), html))
