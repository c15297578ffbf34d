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
import math
import re
from collections.abc import Iterable
from json.encoder import encode_basestring
from typing import Any

from .gotime import GoTime
from .values import NO_VALUE, Operation, positional, scientific, shortest_digits

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
    shortest = repr(value)
    # From 1e-4 to 1e16 Python's repr is positional, and Go's text is the same digits without a
    # trailing ``.0``; exponents, NaN and infinities go the long way.
    if "e" not in shortest and "n" not in shortest:
        return shortest[:-2] if shortest.endswith(".0") else shortest
    return _go_float_from_digits(value)


def _go_float_from_digits(value: float) -> str:
    """:func:`go_float` for any float, from the shortest digits that read back as the value."""
    if not math.isfinite(value):
        raise ValueError(f"json: unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    digits, point = shortest_digits(value)
    if 1e-6 <= abs(value) < 1e21:
        return sign + positional(digits, point)
    return sign + scientific(digits, point, negative_exponent_width=1)


def _escaped(match: re.Match[str]) -> str:
    return _HTML[match.group()]


def _string(text: str, escape_html: bool) -> str:
    # encode_basestring is what json.dumps(text, ensure_ascii=False) calls, without building an encoder.
    if text.isascii():  # no surrogates and no line separators: only <, > and & can need escaping
        encoded = encode_basestring(text)
        if escape_html and ("<" in encoded or ">" in encoded or "&" in encoded):
            return _HTML_CHARS.sub(_escaped, encoded)
        return encoded
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)  # Go writes invalid UTF-8 as U+FFFD
    pattern = _HTML_CHARS if escape_html else _LINE_SEPARATORS
    return pattern.sub(_escaped, encode_basestring(text))


def _encode(value: Any, out: list[str], html: bool) -> None:
    kind = type(value)  # the plain types first, by identity: most of a payload
    if kind is str:
        out.append(_string(value, html))
    elif kind is int:
        out.append(str(value))
    elif kind is float:
        out.append(go_float(value))
    elif kind is dict:
        _object(value, sorted(value, key=str), out, html)
    elif value is None or value is NO_VALUE:
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
        _object(value, value.keys() if isinstance(value, Fields) else sorted(value, key=str), out, html)
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out, html)
        out.append("]")
    else:
        out.append(_string(str(value), html))


def _object(value: dict[Any, Any], keys: Iterable[Any], out: list[str], html: bool) -> None:
    out.append("{")
    for i, key in enumerate(keys):
        if i:
            out.append(",")
        out.append(_string(str(key), html))
        out.append(":")
        _encode(value[key], out, html)
    out.append("}")
