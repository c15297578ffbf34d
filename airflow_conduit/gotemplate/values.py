"""Go values as templates see them, in Python: how they print (``fmt``'s ``%v``), whether they are true,
and how they compare (pure Python).

The Python types that stand for Go's:

- ``str``, ``bool``, ``int``, ``float``, ``None`` (``nil``): themselves;
- :class:`StringMap`: ``map[string]string`` (Conduit's metadata): a missing key is ``""``;
- ``dict``: ``map[string]interface{}`` (structured data): a missing key is :data:`NO_VALUE`;
- ``list``/``tuple``: slices;
- :class:`RawData`: Conduit's raw data, a ``[]byte`` without a ``String`` method (prints as ``[104 105]``);
- :class:`Position`: a ``[]byte`` whose ``String`` is its text;
- :class:`Operation`: an ``int`` that prints as ``create``/``update``/``delete``/``snapshot``;
- :class:`Struct` subclasses: Go structs (fields by name).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, ClassVar


class TemplateExecError(ValueError):
    """Executing the template failed for this record (Conduit nacks the record then)."""


class _NoValue:
    """A missing key of a ``map[string]interface{}``: prints as ``<no value>``, is false."""

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Any = _NoValue()


class StringMap(dict[str, str]):
    """``map[string]string``: a missing key is the zero value ``""``."""


class RawData(bytes):
    """Conduit's ``opencdc.RawData``."""


class Position(bytes):
    """Conduit's ``opencdc.Position``; prints as its text."""


class Operation(int):
    NAMES: ClassVar[dict[int, str]] = {1: "create", 2: "update", 3: "delete", 4: "snapshot"}

    @classmethod
    def named(cls, name: str) -> Operation:
        for number, known in cls.NAMES.items():
            if known == name:
                return cls(number)
        raise ValueError(f"unknown operation {name!r}")

    def __str__(self) -> str:
        return self.NAMES.get(int(self), f"Operation({int(self)})")


class GoInt(int):
    """An integer constant in the template, a Go ``int``; integers of records and the results of Sprig's
    arithmetic are ``int64`` (plain ``int``). Sprig's ``duration`` reads only an ``int64``."""


class Struct:
    """A Go struct: :attr:`FIELDS` are its exported fields, in order (how it prints)."""

    FIELDS: ClassVar[tuple[str, ...]] = ()
    UNEXPORTED: ClassVar[int] = 0
    """Unexported fields after :attr:`FIELDS`, all nil: ``%v`` prints them (as ``<nil>``), templates
    cannot reach them."""
    GO_TYPE: ClassVar[str] = ""

    def text(self) -> str:
        """How ``fmt`` prints the struct: its fields in braces (a type with a ``String`` method differs)."""
        parts = [to_text(getattr(self, name)) for name in self.FIELDS] + ["<nil>"] * self.UNEXPORTED
        return "{" + " ".join(parts) + "}"

    def field(self, name: str) -> Any:
        if name not in self.FIELDS:
            raise TemplateExecError(f"can't evaluate field {name} in type {type(self).__name__}")
        return getattr(self, name)


def go_type(value: Any) -> str:
    """The Go type name a message shows."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Operation):
        return "opencdc.Operation"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, RawData):
        return "opencdc.RawData"
    if isinstance(value, Position):
        return "opencdc.Position"
    if isinstance(value, bytes):
        return "[]uint8"
    if isinstance(value, StringMap):
        return "opencdc.Metadata"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list | tuple):
        return "[]interface {}"
    if value is None or value is NO_VALUE:
        return "<nil>"
    return getattr(value, "GO_TYPE", "") or type(value).__name__


def format_float(value: float) -> str:
    """``fmt``'s ``%v`` of a float64 (``strconv.FormatFloat(f, 'g', -1, 64)``): the shortest digits that
    read back as the value, in exponent form when the exponent is below -4 or at least 6 (``1e+06``)."""
    if 1e-4 <= abs(value) < 1e6:
        # Python's repr is positional here too, with the same digits and a ``.0`` Go does not write.
        shortest = repr(value)
        return shortest[:-2] if shortest.endswith(".0") else shortest
    return format_float_from_digits(value)


def format_float_from_digits(value: float) -> str:
    """:func:`format_float` for any float, from the shortest digits that read back as the value."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    digits, point = shortest_digits(value)
    if -4 <= point - 1 < 6:
        return sign + positional(digits, point)
    return sign + scientific(digits, point, negative_exponent_width=2)


def shortest_digits(value: float) -> tuple[str, int]:
    """The shortest decimal digits that read back as ``abs(value)`` (finite, not zero), and where the
    point goes: ``abs(value) == 0.DIGITS x 10**point``. Python's repr is that shortest form, as Go's
    precision -1 is."""
    _, digit_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    return digits, len(digits) + int(exponent)


def positional(digits: str, point: int) -> str:
    """``0.DIGITS x 10**point`` without an exponent: ``0.00123``, ``123``, ``123000``, ``1.23``."""
    if point <= 0:
        return f"0.{'0' * -point}{digits}"
    if point >= len(digits):
        return digits + "0" * (point - len(digits))
    return f"{digits[:point]}.{digits[point:]}"


def scientific(digits: str, point: int, *, negative_exponent_width: int) -> str:
    """``0.DIGITS x 10**point`` as ``D.DDDe+PP``: strconv writes at least two exponent digits, which
    ``encoding/json`` trims to one for a negative exponent (``1e-07`` in ``fmt``, ``1e-7`` in JSON)."""
    power = point - 1
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    if power >= 0:
        return f"{mantissa}e+{power:02d}"
    return f"{mantissa}e-{-power:0{negative_exponent_width}d}"


def to_text(value: Any) -> str:
    """``fmt.Sprint(value)``, as a template prints an action's value."""
    if value is NO_VALUE:
        return "<no value>"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Operation):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Position):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, bytes):
        return "[" + " ".join(str(b) for b in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{to_text(k)}:{to_text(value[k])}" for k in sorted(value, key=str)) + "]"
    if isinstance(value, list | tuple):
        return "[" + " ".join(to_text(item) for item in value) + "]"
    if isinstance(value, Struct):
        return value.text()
    return str(value)


def truth(value: Any) -> bool:
    """Go template truth: false, 0, nil, and empty strings, maps and slices are false."""
    if value is None or value is NO_VALUE:
        return False
    if isinstance(value, bool | int | float):
        return bool(value)
    if isinstance(value, str | bytes | dict | list | tuple):
        return len(value) > 0
    return True


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    # Go refuses to compare an int with a float64. Here both are one kind: JSON numbers reach Conduit's
    # templates as float64 (json.decode) but are stored typed here, so `eq .Payload.After.n 0.0` and
    # `eq .Payload.After.n 0` must both work as they do for the Conduit user who wrote either.
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None or value is NO_VALUE:
        return "nil"
    return "other"


def equal(left: Any, right: Any) -> bool:
    """``eq left right``: basic values of one kind compare; mixing kinds is an error, as in Go."""
    left_kind, right_kind = _kind(left), _kind(right)
    if "nil" in (left_kind, right_kind):
        return left_kind == right_kind
    if left_kind == "other" or right_kind == "other":
        raise TemplateExecError(f"incompatible types for comparison: {go_type(left)} and {go_type(right)}")
    if left_kind != right_kind:
        raise TemplateExecError("incompatible types for comparison")
    return bool(left == right)


def less(left: Any, right: Any) -> bool:
    """``lt left right`` for basic values of one kind (not bools), as in Go."""
    left_kind, right_kind = _kind(left), _kind(right)
    if left_kind in ("other", "nil", "bool") or right_kind in ("other", "nil", "bool"):
        raise TemplateExecError(f"invalid type for comparison: {go_type(left)}")
    if left_kind != right_kind:
        raise TemplateExecError("incompatible types for comparison")
    return bool(left < right)
