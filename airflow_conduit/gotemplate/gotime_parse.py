"""``time.Parse`` by a Go layout, with Go's error messages (pure Python)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from .gotime import LONG_DAYS, LONG_MONTHS, NS, GoTime, chunks, go_quote


class TimeParseError(ValueError):
    """``time.Parse`` failed; the message is Go's ``*time.ParseError`` text."""


# ---- parsing --------------------------------------------------------------------------------------
class _Bad(Exception):
    pass


def _getnum(value: str, fixed: bool) -> tuple[int, str]:
    if not value[:1].isdigit() or not value[:1].isascii():
        raise _Bad
    if not (len(value) > 1 and value[1].isdigit() and value[1].isascii()):
        if fixed:
            raise _Bad
        return int(value[0]), value[1:]
    return int(value[:2]), value[2:]


def _lookup(names: list[str], value: str) -> tuple[int, str]:
    for index, name in enumerate(names):
        if value[: len(name)].lower() == name.lower():
            return index, value[len(name) :]
    raise _Bad


def _skip(value: str, prefix: str) -> str:
    while prefix:
        if prefix[0] == " ":
            if value and value[0] != " ":
                raise _Bad
            prefix, value = prefix.lstrip(" "), value.lstrip(" ")
            continue
        if not value or value[0] != prefix[0]:
            raise _Bad
        prefix, value = prefix[1:], value[1:]
    return value


def _nanos(value: str, count: int) -> int:
    digits = value[1:count][:9]
    return int(digits.ljust(9, "0")) if digits else 0


_ZONE_NAME = re.compile(r"GMT[+-]\d{1,2}|[A-Z]{3,4}T|[A-Z]{3}")


def parse_time(layout: str, value: str) -> GoTime:
    """``time.Parse(layout, value)`` (in the local zone, UTC, as ``time.ParseInLocation`` with Local);
    :class:`TimeParseError` with Go's message."""
    original = value
    fields: dict[str, int] = {"year": 0, "month": -1, "day": -1, "yday": -1, "hour": 0, "minute": 0}
    fields.update({"second": 0, "nanos": 0})
    pm: bool | None = None
    utc = False
    zone_offset: int | None = None
    zone_name = ""
    elements = chunks(layout)

    def failure(element: str, rest: str, message: str = "") -> TimeParseError:
        if message:
            return TimeParseError(f"parsing time {go_quote(original)}{message}")
        return TimeParseError(
            f"parsing time {go_quote(original)} as {go_quote(layout)}: cannot parse {go_quote(rest)} as "
            f"{go_quote(element)}"
        )

    for position, (kind, text) in enumerate(elements):
        if not kind:
            try:
                value = _skip(value, text)
            except _Bad:
                raise failure(text, value) from None
            continue
        hold = value
        range_error = ""
        try:
            if kind == "Year":
                if len(value) < 2:
                    raise _Bad
                number, value = int(value[:2]) if value[:2].isdigit() else _raise(), value[2:]
                fields["year"] = number + (1900 if number >= 69 else 2000)
            elif kind == "LongYear":
                if len(value) < 4 or not value[:4].isdigit():
                    raise _Bad
                fields["year"], value = int(value[:4]), value[4:]
            elif kind in ("Month", "LongMonth"):
                names = LONG_MONTHS if kind == "LongMonth" else [m[:3] for m in LONG_MONTHS]
                month, value = _lookup(names, value)
                fields["month"] = month + 1
            elif kind in ("NumMonth", "ZeroMonth"):
                fields["month"], value = _getnum(value, kind == "ZeroMonth")
                if not 0 < fields["month"] <= 12:
                    range_error = "month"
            elif kind in ("WeekDay", "LongWeekDay"):
                names = LONG_DAYS if kind == "LongWeekDay" else [d[:3] for d in LONG_DAYS]
                _, value = _lookup(names, value)
            elif kind in ("Day", "UnderDay", "ZeroDay"):
                if kind == "UnderDay" and value[:1] == " ":
                    value = value[1:]
                fields["day"], value = _getnum(value, kind == "ZeroDay")
            elif kind in ("UnderYearDay", "ZeroYearDay"):
                for _ in range(2):
                    if kind == "UnderYearDay" and value[:1] == " ":
                        value = value[1:]
                digits = re.match(r"\d{3}" if kind == "ZeroYearDay" else r"\d{1,3}", value)
                if digits is None:
                    raise _Bad
                fields["yday"], value = int(digits.group()), value[digits.end() :]
                if not 1 <= fields["yday"] <= 366:
                    range_error = "day-of-year"
            elif kind == "Hour":
                fields["hour"], value = _getnum(value, False)
                if not 0 <= fields["hour"] < 24:
                    range_error = "hour"
            elif kind in ("Hour12", "ZeroHour12"):
                fields["hour"], value = _getnum(value, kind == "ZeroHour12")
                if not 0 <= fields["hour"] <= 12:
                    range_error = "hour"
            elif kind in ("Minute", "ZeroMinute"):
                fields["minute"], value = _getnum(value, kind == "ZeroMinute")
                if not 0 <= fields["minute"] < 60:
                    range_error = "minute"
            elif kind in ("Second", "ZeroSecond"):
                fields["second"], value = _getnum(value, kind == "ZeroSecond")
                if not 0 <= fields["second"] < 60:
                    range_error = "second"
                # A fraction the layout does not name is read anyway, unless the layout names one next.
                following = elements[position + 1][0] if position + 1 < len(elements) else ""
                if re.match(r"[.,]\d", value) and following != "Frac":
                    count = 2
                    while count < len(value) and value[count].isdigit():
                        count += 1
                    fields["nanos"], value = _nanos(value, count), value[count:]
            elif kind in ("PM", "pm"):
                marker = value[:2]
                if marker not in (("PM", "AM") if kind == "PM" else ("pm", "am")):
                    raise _Bad
                pm, value = marker.lower() == "pm", value[2:]
            elif kind in ("NumTZ", "ISOTZ"):
                if kind == "ISOTZ" and value[:1] == "Z":
                    utc, value = True, value[1:]
                else:
                    zone_offset, value, range_error = _parse_offset(text.lstrip("Z-"), value)
            elif kind == "TZ":
                if value[:3] == "UTC":
                    utc, value = True, value[3:]
                else:
                    name = _ZONE_NAME.match(value)
                    if name is None:
                        raise _Bad
                    zone_name, value = name.group(), value[name.end() :]
            elif kind == "Frac":
                if text[1] == "0":
                    count = len(text)
                    if len(value) < count or not value[1:count].isdigit():
                        raise _Bad
                    fields["nanos"], value = _nanos(value, count), value[count:]
                elif re.match(r"[.,]\d", value):
                    count = 2
                    while count < len(value) and value[count].isdigit():
                        count += 1
                    fields["nanos"], value = _nanos(value, count), value[count:]
        except _Bad:
            raise failure(text, hold) from None
        if range_error:
            raise failure(text, value, f": {range_error} out of range")
    if value:
        raise failure("", "", f": extra text: {go_quote(value)}")
    if pm is True and fields["hour"] < 12:
        fields["hour"] += 12
    elif pm is False and fields["hour"] == 12:
        fields["hour"] = 0
    year, month, day = fields["year"], fields["month"], fields["day"]
    if fields["yday"] >= 0:
        start = datetime(max(year, 1), 1, 1) + timedelta(days=fields["yday"] - 1)
        if start.year != max(year, 1):
            raise failure("", "", ": day-of-year out of range")
        month, day = start.month, start.day
    month = 1 if month < 0 else month
    day = 1 if day < 0 else day
    if not 1 <= day <= _days_in(month, year):
        raise failure("", "", ": day out of range")
    unix = _unix_of(year, month, day, fields["hour"], fields["minute"], fields["second"])
    unix_ns = unix * NS + fields["nanos"]
    if utc or (zone_offset is None and not zone_name):
        return GoTime(unix_ns)
    if zone_offset is not None:
        # The local zone (UTC) is used when its offset matches, as Go does; else a zone without a name.
        return GoTime(unix_ns - zone_offset * NS, zone_offset, "UTC" if zone_offset == 0 else "")
    # A zone name Go does not know in the local zone: that name at offset 0 (GMT+h: h hours).
    offset = int(zone_name[3:]) * 3600 if zone_name.startswith("GMT") and len(zone_name) > 3 else 0
    return GoTime(unix_ns - offset * NS, offset, zone_name)


def _raise() -> int:
    raise _Bad


def _parse_offset(shape: str, value: str) -> tuple[int, str, str]:
    """A numeric zone offset shaped like ``shape`` (``07:00``, ``0700``, ``07``, ``070000``, ``07:00:00``)."""
    colon = ":" in shape
    size = 1 + len(shape)
    if len(value) < size:
        raise _Bad
    body = value[1:size]
    if colon and any(body[i] != ":" for i in range(2, len(body), 3)):
        raise _Bad
    parts = body.split(":") if colon else [body[i : i + 2] for i in range(0, len(body), 2)]
    if not all(len(p) == 2 and p.isdigit() for p in parts):
        raise _Bad
    hours, minutes, seconds = (int(p) for p in [*parts, "00", "00"][:3])
    range_error = ""
    if hours > 24:
        range_error = "time zone offset hour"
    elif minutes > 60:
        range_error = "time zone offset minute"
    elif seconds > 60:
        range_error = "time zone offset second"
    offset = (hours * 60 + minutes) * 60 + seconds
    if value[0] == "-":
        offset = -offset
    elif value[0] != "+":
        raise _Bad
    return offset, value[size:], range_error


def _days_in(month: int, year: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _unix_of(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    # datetime has no year 0 (Go's zero-year layouts parse to it): count from year 1 and go back a year.
    shift = 0
    if year < 1:
        shift, year = (1 - year), 1
    days = (datetime(year, month, min(day, _days_in(month, year))) - datetime(1970, 1, 1)).days
    days -= sum(366 if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) else 365 for y in range(1 - shift, 1))
    return days * 86400 + hour * 3600 + minute * 60 + second
