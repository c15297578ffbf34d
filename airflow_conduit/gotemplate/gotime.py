"""Go's ``time`` package as templates and ``field.convert`` use it, in pure Python: a ``time.Time`` with
nanoseconds and a zone (:class:`GoTime`), formatting by Go layouts (the reference time
``Mon Jan 2 15:04:05 MST 2006``), ``time.Duration``'s text and ``time.ParseDuration``. Parsing by a
layout is :mod:`.gotime_parse`.

The local zone (``time.Local``) is UTC here, as in Conduit's container image.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .values import Struct, TemplateExecError

NS = 1_000_000_000
RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_NANO = "2006-01-02T15:04:05.999999999Z07:00"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ZERO_UNIX = -62135596800  # time.Time{}: January 1, year 1, 00:00:00 UTC
_STARTED = time.monotonic()
LONG_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
LONG_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


@dataclass(frozen=True)
class GoTime(Struct):
    """A ``time.Time``: an instant (``unix_ns``) shown at ``offset`` seconds east of UTC, zone ``zone``
    (``""`` for a fixed zone without a name, printed as its offset). ``monotonic`` (seconds since the
    process started) is set on ``now``'s value, which Go prints with ``m=+...``."""

    unix_ns: int
    offset: int = 0
    zone: str = "UTC"
    monotonic: float | None = dataclass_field(default=None, compare=False)
    GO_TYPE: ClassVar[str] = "time.Time"
    METHODS: ClassVar[tuple[str, ...]] = (
        "Unix",
        "UnixMilli",
        "UnixMicro",
        "UnixNano",
        "Year",
        "Day",
        "Hour",
        "Minute",
        "Second",
        "Nanosecond",
        "YearDay",
        "UTC",
        "Local",
        "String",
        "IsZero",
    )

    @classmethod
    def now(cls) -> GoTime:
        return cls(time.time_ns(), monotonic=time.monotonic() - _STARTED)

    @classmethod
    def unix(cls, seconds: int, nanos: int = 0) -> GoTime:
        """``time.Unix(seconds, nanos)``, in the local zone (UTC)."""
        return cls(seconds * NS + nanos)

    def wall(self) -> tuple[datetime, int]:
        """The wall clock at the time's zone (to the second) and the nanoseconds within that second."""
        seconds, nanos = divmod(self.unix_ns, NS)
        return _EPOCH.replace(tzinfo=None) + timedelta(seconds=seconds + self.offset), nanos

    def in_zone(self, name: str) -> GoTime:
        """``t.In(loc)`` for ``time.LoadLocation(name)``; a name Go cannot load is UTC (as Sprig does)."""
        if name in ("", "UTC", "Local"):
            return replace(self, offset=0, zone="UTC")
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return replace(self, offset=0, zone="UTC")
        instant = _EPOCH + timedelta(seconds=self.unix_ns // NS)
        local = instant.astimezone(zone)
        offset = local.utcoffset() or timedelta(0)
        return replace(self, offset=int(offset.total_seconds()), zone=local.tzname() or "")

    def format(self, layout: str) -> str:
        return format_time(self, layout)

    def add(self, nanos: int) -> GoTime:
        return replace(self, unix_ns=self.unix_ns + nanos, monotonic=None)

    def field(self, name: str) -> Any:
        # A template reaches a time's methods as fields: {{ (now).Unix }}.
        if name not in self.METHODS:
            raise TemplateExecError(f"can't evaluate field {name} in type time.Time")
        wall, nanos = self.wall()
        seconds = self.unix_ns // NS
        return {
            "Unix": lambda: seconds,
            "UnixMilli": lambda: self.unix_ns // 1_000_000,
            "UnixMicro": lambda: self.unix_ns // 1_000,
            "UnixNano": lambda: self.unix_ns,
            "Year": lambda: wall.year,
            "Day": lambda: wall.day,
            "Hour": lambda: wall.hour,
            "Minute": lambda: wall.minute,
            "Second": lambda: wall.second,
            "Nanosecond": lambda: nanos,
            "YearDay": lambda: wall.timetuple().tm_yday,
            "UTC": lambda: replace(self, offset=0, zone="UTC", monotonic=None),
            "Local": lambda: replace(self, offset=0, zone="UTC", monotonic=None),
            "String": lambda: str(self),
            "IsZero": lambda: self.unix_ns == _ZERO_UNIX * NS,
        }[name]()

    def text(self) -> str:
        return str(self)

    def __str__(self) -> str:
        """``t.String()``: ``2006-01-02 15:04:05.999999999 -0700 MST``, and ``m=±s`` for ``now``."""
        text = self.format("2006-01-02 15:04:05.999999999 -0700 MST")
        if self.monotonic is not None:
            text += f" m={self.monotonic:+.9f}"
        return text

    def json(self) -> str:
        """What ``encoding/json`` writes for a ``time.Time`` (``MarshalJSON``): RFC 3339 with nanoseconds."""
        return self.format(RFC3339_NANO)


ZERO_TIME = GoTime(_ZERO_UNIX * NS)


# ---- layouts ----------------------------------------------------------------------------------------
# Go's layout elements (time/format.go nextStdChunk), longest first where one is a prefix of another.
_STD = re.compile(
    r"""
    (?P<LongMonth>January) | (?P<Month>Jan)(?![a-z]) | (?P<LongWeekDay>Monday) | (?P<WeekDay>Mon)(?![a-z])
  | (?P<TZ>MST)
  | (?P<ZeroYearDay>002) | (?P<Std0x>0[1-6])
  | (?P<Hour>15) | (?P<NumMonth>1)
  | (?P<LongYear>2006) | (?P<Day>2)
  | _(?P<LongYearU>2006) | (?P<UnderDay>_2) | (?P<UnderYearDay>__2)
  | (?P<Hour12>3) | (?P<Minute>4) | (?P<Second>5)
  | (?P<PM>PM) | (?P<pm>pm)
  | (?P<NumTZ>-070000|-07:00:00|-0700|-07:00|-07)
  | (?P<ISOTZ>Z070000|Z07:00:00|Z0700|Z07:00|Z07)
  | (?P<Frac>[.,](?:0+|9+))(?![0-9])
    """,
    re.VERBOSE,
)
_STD0X = {"01": "ZeroMonth", "02": "ZeroDay", "03": "ZeroHour12", "04": "ZeroMinute", "05": "ZeroSecond"}


def chunks(layout: str) -> list[tuple[str, str]]:
    """The layout as (kind, text): kind ``""`` for literal text, else the element's name."""
    out: list[tuple[str, str]] = []
    index = 0
    literal = ""
    while index < len(layout):
        match = _STD.match(layout, index)
        if match is None:
            literal += layout[index]
            index += 1
            continue
        kind = match.lastgroup or ""
        text = match.group()
        if kind == "LongYearU":  # `_2006` is a literal `_` and the year
            literal, kind, text = literal + "_", "LongYear", "2006"
        elif kind == "Std0x":
            kind = "Year" if text == "06" else _STD0X[text]
        if literal:
            out.append(("", literal))
            literal = ""
        out.append((kind, text))
        index = match.end()
    if literal:
        out.append(("", literal))
    return out


def format_time(moment: GoTime, layout: str) -> str:
    """``t.Format(layout)``."""
    wall, nanos = moment.wall()
    out: list[str] = []
    for kind, text in chunks(layout):
        out.append(text if not kind else _format_element(kind, text, moment, wall, nanos))
    return "".join(out)


def _format_element(kind: str, text: str, moment: GoTime, wall: datetime, nanos: int) -> str:
    hour12 = wall.hour % 12 or 12
    weekday = LONG_DAYS[(wall.weekday() + 1) % 7]
    simple = {
        "Year": f"{wall.year % 100:02d}",
        "LongYear": f"{wall.year:04d}",
        "Month": LONG_MONTHS[wall.month - 1][:3],
        "LongMonth": LONG_MONTHS[wall.month - 1],
        "NumMonth": str(wall.month),
        "ZeroMonth": f"{wall.month:02d}",
        "WeekDay": weekday[:3],
        "LongWeekDay": weekday,
        "Day": str(wall.day),
        "UnderDay": f"{wall.day:>2d}",
        "ZeroDay": f"{wall.day:02d}",
        "UnderYearDay": f"{wall.timetuple().tm_yday:>3d}",
        "ZeroYearDay": f"{wall.timetuple().tm_yday:03d}",
        "Hour": f"{wall.hour:02d}",
        "Hour12": str(hour12),
        "ZeroHour12": f"{hour12:02d}",
        "Minute": str(wall.minute),
        "ZeroMinute": f"{wall.minute:02d}",
        "Second": str(wall.second),
        "ZeroSecond": f"{wall.second:02d}",
        "PM": "PM" if wall.hour >= 12 else "AM",
        "pm": "pm" if wall.hour >= 12 else "am",
    }
    if kind in simple:
        return simple[kind]
    if kind == "Frac":
        digits = f"{nanos:09d}"[: len(text) - 1]
        if text[1] == "9":
            digits = digits.rstrip("0")
            if not digits:
                return ""
        return text[0] + digits
    if kind == "TZ":
        return moment.zone if moment.zone else _offset_text("-0700", moment.offset)
    if kind == "ISOTZ" and moment.offset == 0:
        return "Z"
    return _offset_text(text, moment.offset)


def _offset_text(layout: str, offset: int) -> str:
    sign = "-" if offset < 0 else "+"
    absolute = abs(offset)
    hours, minutes, seconds = absolute // 3600, absolute // 60 % 60, absolute % 60
    digits = layout.lstrip("Z-")  # 070000, 07:00:00, 0700, 07:00, 07
    out = f"{sign}{hours:02d}"
    if len(digits) > 2:
        out += (":" if ":" in digits else "") + f"{minutes:02d}"
    if len(digits.replace(":", "")) == 6:
        out += (":" if ":" in digits else "") + f"{seconds:02d}"
    return out


def go_quote(text: str) -> str:
    """``strconv.Quote`` for the texts Go's time errors show."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---- durations ------------------------------------------------------------------------------------
_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": NS,
    "m": 60 * NS,
    "h": 3600 * NS,
}
_MAX_DURATION = 2**63 - 1


def _frac(value: int, precision: int) -> str:
    whole, rest = divmod(value, 10**precision)
    digits = f"{rest:0{precision}d}".rstrip("0") if precision else ""
    return f"{whole}.{digits}" if digits else str(whole)


def duration_text(nanos: int) -> str:
    """``time.Duration(nanos).String()``: ``1h2m3.5s``, ``1.5ms``, ``0s``."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    u = abs(nanos)
    if u < NS:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{_frac(u, 3)}µs"
        return f"{sign}{_frac(u, 6)}ms"
    seconds_text = _frac(u % (60 * NS), 9)
    minutes = u // (60 * NS)
    if not minutes:
        return f"{sign}{seconds_text}s"
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{f'{hours}h' if hours else ''}{minutes}m{seconds_text}s"


def parse_duration(text: str) -> int:
    """``time.ParseDuration``: nanoseconds; ``ValueError`` with Go's message."""
    original, rest = text, text
    invalid = ValueError(f"time: invalid duration {go_quote(original)}")
    negative = rest[:1] == "-"
    if rest[:1] in "+-" and rest:
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise invalid
    total = Fraction(0)
    while rest:
        number = re.match(r"(\d*)(?:\.(\d*))?", rest)
        assert number is not None  # the pattern matches the empty string
        whole, fraction = number.group(1), number.group(2)
        if not whole and not fraction:
            raise invalid
        rest = rest[number.end() :]
        unit_match = re.match(r"[^\d.]*", rest)
        unit = unit_match.group() if unit_match else ""
        if not unit:
            raise ValueError(f"time: missing unit in duration {go_quote(original)}")
        if unit not in _UNITS:
            raise ValueError(f"time: unknown unit {go_quote(unit)} in duration {go_quote(original)}")
        rest = rest[len(unit) :]
        value = Fraction(int(whole or "0"))
        if fraction:
            value += Fraction(int(fraction), 10 ** len(fraction))
        total += value * _UNITS[unit]
        if total > _MAX_DURATION + (1 if negative else 0):
            raise invalid
    nanos = int(total)  # Go truncates the fraction of a nanosecond
    return -nanos if negative else nanos


def round_duration(nanos: int, unit: int) -> int:
    """``d.Round(unit)``: halves away from zero."""
    whole, rest = divmod(abs(nanos), unit)
    rounded = (whole + (1 if rest * 2 >= unit else 0)) * unit
    return -rounded if nanos < 0 else rounded
