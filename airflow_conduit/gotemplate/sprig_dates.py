"""Sprig's date functions (``date.go``), with Go's types: a value of a type a function does not take
reads the clock (``date``, ``ago``) or counts as zero (``duration``), as in Sprig (pure Python).

Functions that read the clock make a template's result depend on when it runs: :data:`READS_CLOCK`
(such a template is never translated to Spark SQL and is evaluated once per record).
"""

from __future__ import annotations

from typing import Any

from .gotime import (
    NS,
    ZERO_TIME,
    GoTime,
    duration_text,
    parse_duration,
    round_duration,
)
from .gotime_parse import TimeParseError, parse_time
from .values import GoInt, TemplateExecError, go_type


def _time_arg(value: Any, function: str) -> GoTime:
    # A Go function declared with a time.Time parameter: a template passing anything else fails.
    if not isinstance(value, GoTime):
        raise TemplateExecError(
            f"wrong type for value; expected time.Time; got {go_type(value)} (calling {function})"
        )
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def date_in_zone(layout: str, date: Any, zone: str) -> str:
    if isinstance(date, GoTime):
        moment = date
    elif _is_int(date):  # int, int32, int64: Unix seconds
        moment = GoTime.unix(int(date))
    else:
        moment = GoTime.now()  # any other type: now, as Sprig does
    return moment.in_zone(zone).format(layout)


def date_modify(text: str, date: Any) -> GoTime:
    moment = _time_arg(date, "dateModify")
    try:
        return moment.add(parse_duration(text))
    except ValueError:
        return moment


def must_date_modify(text: str, date: Any) -> GoTime:
    moment = _time_arg(date, "mustDateModify")
    try:
        return moment.add(parse_duration(text))
    except ValueError as error:
        raise TemplateExecError(str(error)) from None


def ago(date: Any) -> str:
    if isinstance(date, GoTime):
        moment = date
    elif _is_int(date):
        moment = GoTime.unix(int(date))
    else:
        moment = GoTime.now()
    return duration_text(round_duration(GoTime.now().unix_ns - moment.unix_ns, NS))


def duration(seconds: Any) -> str:
    count = 0
    if isinstance(seconds, str):
        try:
            count = int(seconds, 10) if seconds.lstrip("+-").isdigit() else 0
        except ValueError:
            count = 0
    elif _is_int(seconds) and not isinstance(seconds, GoInt):  # only an int64
        count = int(seconds)
    return duration_text(count * NS)


def duration_round(value: Any) -> str:
    nanos = 0
    if isinstance(value, str):
        try:
            nanos = parse_duration(value)
        except ValueError:
            nanos = 0
    elif _is_int(value) and not isinstance(value, GoInt):
        nanos = int(value)
    elif isinstance(value, GoTime):
        nanos = GoTime.now().unix_ns - value.unix_ns
    u = abs(nanos)
    hour = 3600 * NS
    for size, unit in ((hour * 24 * 365, "y"), (hour * 24 * 30, "mo"), (hour * 24, "d"), (hour, "h")):
        if u > size:
            return f"{u // size}{unit}"
    for size, unit in ((60 * NS, "m"), (NS, "s")):
        if u > size:
            return f"{u // size}{unit}"
    return "0s"


def to_date(layout: str, text: str) -> GoTime:
    try:
        return parse_time(layout, text)
    except TimeParseError:
        return ZERO_TIME


def must_to_date(layout: str, text: str) -> GoTime:
    try:
        return parse_time(layout, text)
    except TimeParseError as error:
        raise TemplateExecError(str(error)) from None


SPRIG_DATES: dict[str, Any] = {
    "now": GoTime.now,
    "date": lambda layout, date: date_in_zone(layout, date, "Local"),
    "dateInZone": date_in_zone,
    "date_in_zone": date_in_zone,
    "htmlDate": lambda date: date_in_zone("2006-01-02", date, "Local"),
    "htmlDateInZone": lambda date, zone: date_in_zone("2006-01-02", date, zone),
    "dateModify": date_modify,
    "date_modify": date_modify,
    "mustDateModify": must_date_modify,
    "must_date_modify": must_date_modify,
    "ago": ago,
    "duration": duration,
    "durationRound": duration_round,
    "toDate": to_date,
    "mustToDate": must_to_date,
    "unixEpoch": lambda date: str(_time_arg(date, "unixEpoch").unix_ns // NS),
}

READS_CLOCK = frozenset(
    {"now", "ago", "date", "dateInZone", "date_in_zone", "htmlDate", "htmlDateInZone", "durationRound"}
)
"""Date functions whose result can depend on when they run: ``now``, those that fall back to it for a
value of another type, and ``durationRound`` of a time."""
