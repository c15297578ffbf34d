"""Go durations (``100ms``, ``1m30s``), the type of Conduit's time settings."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> float:
    """Seconds in a Go duration (``100ms``, ``1m30s``, ``1.5s``; ``0`` alone)."""
    value = text.strip()
    if value in ("0", "-0", "+0"):
        return 0.0
    if not value or _DURATION.sub("", value.lstrip("+")) != "":
        raise ValueError(f"not a Go duration: {text!r} (e.g. 100ms, 5s, 1m30s)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION.findall(value))
