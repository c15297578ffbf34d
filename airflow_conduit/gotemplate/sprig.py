"""The Sprig functions Conduit puts into its templates (``sprig.FuncMap()``), the commonly used ones, with
Sprig's argument order (the value a pipeline passes comes last) (pure Python).

A template that calls a Sprig function not listed here is refused when the pipeline file is validated.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import random
import re
import string
import uuid
from typing import Any

from .gojson import go_json
from .sprig_dates import READS_CLOCK, SPRIG_DATES
from .values import TemplateExecError, go_type, to_text, truth


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        try:
            return int(float(str(value)))
        except ValueError:
            return 0  # Sprig's toInt turns what it cannot read into 0


def _float(value: Any) -> float:
    try:
        return float(value if isinstance(value, int | float) else str(value).strip())
    except ValueError:
        return 0.0


def _default(fallback: Any, *given: Any) -> Any:
    return given[0] if given and truth(given[0]) else fallback


def _coalesce(*values: Any) -> Any:
    return next((v for v in values if truth(v)), None)


def _to_json(value: Any) -> str:
    return go_json(value)  # encoding/json's Marshal: a record's fields in order, HTML escaped


def _b64dec(text: str) -> str:
    try:
        return base64.b64decode(text, validate=True).decode("utf-8", errors="replace")
    except ValueError as error:
        return str(error)  # Sprig returns the error's text


def _substr(start: int, end: int, text: str) -> str:
    if start < 0:
        return text[:end]
    if end < 0 or end > len(text):
        return text[start:]
    return text[start:end]


def _trunc(length: int, text: str) -> str:
    if length < 0:
        return text[length:] if -length < len(text) else text
    return text[:length]


def _split(separator: str, text: str) -> dict[str, str]:
    return {f"_{i}": part for i, part in enumerate(text.split(separator))}


def _dict(*pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(0, len(pairs), 2):
        out[to_text(pairs[i])] = pairs[i + 1] if i + 1 < len(pairs) else ""
    return out


def _join(separator: str, values: Any) -> str:
    if isinstance(values, str):
        return values
    return separator.join(to_text(v) for v in values)


def _random(alphabet: str, length: int) -> str:
    return "".join(random.choice(alphabet) for _ in range(length))  # noqa: S311 - not a secret, as in Sprig


def _title(text: str) -> str:
    return re.sub(r"(^|\s)(\S)", lambda m: m.group(1) + m.group(2).upper(), text)


def _snake(text: str) -> str:
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", text).replace("-", "_").replace(" ", "_").lower()


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_\s-]+", text) if part)


def _kind_of(value: Any) -> str:
    kind = go_type(value)
    return {"map[string]interface {}": "map", "[]interface {}": "slice", "opencdc.Metadata": "map"}.get(
        kind, kind
    )


def _div(a: Any, b: Any) -> int:
    divisor = _int(b)
    if divisor == 0:
        raise TemplateExecError("integer divide by zero")
    quotient = abs(_int(a)) // abs(divisor)
    return quotient if (_int(a) >= 0) == (divisor > 0) else -quotient  # Go truncates toward zero


def _mod(a: Any, b: Any) -> int:
    # Go's % on int64: the sign of the dividend, exact (math.fmod would go through float64).
    dividend, divisor = _int(a), _int(b)
    if divisor == 0:
        raise TemplateExecError("integer divide by zero")
    remainder = abs(dividend) % abs(divisor)
    return -remainder if dividend < 0 else remainder


SPRIG: dict[str, Any] = {
    # strings
    "upper": lambda s: to_text(s).upper(),
    "lower": lambda s: to_text(s).lower(),
    "title": lambda s: _title(to_text(s)),
    "trim": lambda s: to_text(s).strip(),
    "trimAll": lambda cut, s: to_text(s).strip(cut),
    "trimPrefix": lambda prefix, s: to_text(s).removeprefix(prefix),
    "trimSuffix": lambda suffix, s: to_text(s).removesuffix(suffix),
    "contains": lambda sub, s: sub in to_text(s),
    "hasPrefix": lambda prefix, s: to_text(s).startswith(prefix),
    "hasSuffix": lambda suffix, s: to_text(s).endswith(suffix),
    "replace": lambda old, new, s: to_text(s).replace(old, new),
    "repeat": lambda count, s: to_text(s) * _int(count),
    "substr": lambda start, end, s: _substr(_int(start), _int(end), to_text(s)),
    "trunc": lambda length, s: _trunc(_int(length), to_text(s)),
    "nospace": lambda s: re.sub(r"\s", "", to_text(s)),
    "quote": lambda *values: " ".join(
        json.dumps(to_text(v), ensure_ascii=False) for v in values if v is not None
    ),
    "squote": lambda *values: " ".join(f"'{to_text(v)}'" for v in values if v is not None),
    "cat": lambda *values: " ".join(to_text(v) for v in values if v is not None),
    "indent": lambda width, s: "\n".join(" " * _int(width) + line for line in to_text(s).split("\n")),
    "nindent": lambda width, s: "\n" + "\n".join(" " * _int(width) + line for line in to_text(s).split("\n")),
    "snakecase": lambda s: _snake(to_text(s)),
    "camelcase": lambda s: _camel(to_text(s)),
    "kebabcase": lambda s: _snake(to_text(s)).replace("_", "-"),
    "swapcase": lambda s: to_text(s).swapcase(),
    "split": lambda sep, s: _split(sep, to_text(s)),
    "splitList": lambda sep, s: to_text(s).split(sep),
    "join": _join,
    "regexMatch": lambda pattern, s: re.search(pattern, to_text(s)) is not None,
    "regexFind": lambda pattern, s: m.group(0) if (m := re.search(pattern, to_text(s))) else "",
    "regexFindAll": lambda pattern, s, n: [m.group(0) for m in re.finditer(pattern, to_text(s))][
        : None if _int(n) < 0 else _int(n)
    ],
    "regexReplaceAll": lambda pattern, s, repl: re.sub(
        pattern, re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", repl), to_text(s)
    ),
    "regexReplaceAllLiteral": lambda pattern, s, repl: re.sub(pattern, lambda _m: repl, to_text(s)),
    "regexSplit": lambda pattern, s, n: re.split(
        pattern, to_text(s), maxsplit=max(_int(n) - 1, 0) if _int(n) > 0 else 0
    ),
    # conversion and encoding
    "toString": to_text,
    "toStrings": lambda values: [to_text(v) for v in values],
    "atoi": _int,
    "int": _int,
    "int64": _int,
    "float64": _float,
    "toJson": _to_json,
    "toRawJson": lambda value: go_json(value, escape_html=False),
    # Go's encoding rules once (gojson), then laid out with sorted keys and no HTML escapes.
    "toPrettyJson": lambda v: json.dumps(
        json.loads(go_json(v)), indent=2, sort_keys=True, ensure_ascii=False
    ),
    "fromJson": lambda s: json.loads(to_text(s)) if to_text(s).strip() else {},
    "b64enc": lambda s: base64.b64encode(s if isinstance(s, bytes) else to_text(s).encode()).decode(),
    "b64dec": lambda s: _b64dec(to_text(s)),
    "b32enc": lambda s: base64.b32encode(to_text(s).encode()).decode(),
    "sha1sum": lambda s: hashlib.sha1(to_text(s).encode()).hexdigest(),  # noqa: S324 - Sprig's function
    "sha256sum": lambda s: hashlib.sha256(to_text(s).encode()).hexdigest(),
    # defaults and flow
    "default": _default,
    "empty": lambda value: not truth(value),
    "coalesce": _coalesce,
    "ternary": lambda yes, no, condition: yes if truth(condition) else no,
    "fail": lambda message: (_ for _ in ()).throw(TemplateExecError(to_text(message))),
    # numbers
    "add": lambda *values: sum(_int(v) for v in values),
    "add1": lambda value: _int(value) + 1,
    "sub": lambda a, b: _int(a) - _int(b),
    "mul": lambda *values: math.prod(_int(v) for v in values),
    "div": _div,
    "mod": _mod,
    "max": lambda *values: max(_int(v) for v in values),
    "min": lambda *values: min(_int(v) for v in values),
    "addf": lambda *values: sum(_float(v) for v in values),
    "subf": lambda a, *values: _float(a) - sum(_float(v) for v in values),
    "mulf": lambda *values: math.prod(_float(v) for v in values),
    "divf": lambda a, *values: math.prod([_float(a)] + [1 / _float(v) for v in values]),
    "floor": lambda v: float(math.floor(_float(v))),
    "ceil": lambda v: float(math.ceil(_float(v))),
    "round": lambda v, places, *_: round(_float(v), _int(places)),
    # lists and dicts
    "list": lambda *values: list(values),
    "first": lambda values: values[0] if values else None,
    "last": lambda values: values[-1] if values else None,
    "rest": lambda values: list(values[1:]),
    "initial": lambda values: list(values[:-1]),
    "append": lambda values, v: [*values, v],
    "prepend": lambda values, v: [v, *values],
    "concat": lambda *lists: [item for values in lists for item in values],
    "reverse": lambda values: list(reversed(values)),
    "uniq": lambda values: list(dict.fromkeys(values)),
    "has": lambda needle, values: needle in values,
    "compact": lambda values: [v for v in values if truth(v)],
    "sortAlpha": lambda values: sorted(to_text(v) for v in values),
    "dict": _dict,
    "get": lambda mapping, key: mapping.get(key, ""),
    "hasKey": lambda mapping, key: key in mapping,
    "keys": lambda *mappings: [k for mapping in mappings for k in mapping],
    "values": lambda mapping: list(mapping.values()),
    "pick": lambda mapping, *keys: {k: mapping[k] for k in keys if k in mapping},
    "omit": lambda mapping, *keys: {k: v for k, v in mapping.items() if k not in keys},
    # random values, time, environment, types
    "uuidv4": lambda: str(uuid.uuid4()),
    "randAlphaNum": lambda n: _random(string.ascii_letters + string.digits, _int(n)),
    "randAlpha": lambda n: _random(string.ascii_letters, _int(n)),
    "randNumeric": lambda n: _random(string.digits, _int(n)),
    "randInt": lambda low, high: random.randrange(_int(low), _int(high)),  # noqa: S311
    "env": lambda name: os.environ.get(to_text(name), ""),
    "typeOf": go_type,
    "typeIs": lambda name, value: go_type(value) == to_text(name),
    "typeIsLike": lambda name, value: go_type(value) in (to_text(name), "*" + to_text(name)),
    "kindOf": _kind_of,
    "kindIs": lambda kind, value: _kind_of(value) == kind,
    **SPRIG_DATES,
}

NONDETERMINISTIC = READS_CLOCK | {"uuidv4", "randAlphaNum", "randAlpha", "randNumeric", "randInt"}
"""Functions whose result is not a function of their arguments: they read the clock or draw random
values."""
