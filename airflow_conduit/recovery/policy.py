"""Conduit's pipeline-recovery settings and backoff (pure Python).

Conduit (``pkg/lifecycle/service.go``) restarts a pipeline that failed with a transient error after
``min_delay * backoff_factor ** attempt`` with full jitter. Here the delay is deterministic, so that a
restart's delay can be predicted, logged and asserted:

    delay(attempt) = min(max_delay, min_delay * backoff_factor ** (attempt - 1))     attempt >= 1

clamped below at ``min_delay`` as Conduit's backoff is (a factor below 1 never shortens the first delay).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

INFINITE_RETRIES = -1

DurationLike = timedelta | int | float | str

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}


def parse_duration(value: DurationLike, *, name: str = "duration") -> timedelta:
    """A :class:`~datetime.timedelta` from a timedelta, a number of seconds, or a duration string.

    Strings are seconds (``"1.5"``) or Go-style durations as in Conduit's configuration (``"1s"``,
    ``"500ms"``, ``"10m"``, ``"1h30m"``).

    :param value: the value to convert
    :param name: the setting's name, for the error message
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{name}: expected a finite duration, got {value!r}")
        return timedelta(seconds=value)
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            return timedelta(seconds=float(text))
        except ValueError:
            pass
        sign = 1
        if text and text[0] in "+-":
            sign = -1 if text[0] == "-" else 1
            text = text[1:]
        pos, seconds = 0, 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if text and pos == len(text):
            return timedelta(seconds=sign * seconds)
    raise ValueError(
        f"{name}: expected a duration such as 1s, 500ms, 10m or a number of seconds, got {value!r}"
    )


def format_duration(delta: timedelta) -> str:
    """A short human form of a duration: ``1s``, ``2.5s``, ``10m``, ``1h30m``."""
    total = delta.total_seconds()
    if total < 60 or total != int(total):
        return f"{total:g}s"
    total = int(total)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if seconds:
        out += f"{seconds}s"
    return out


@dataclass(frozen=True, init=False)
class RecoveryPolicy:
    """How a pipeline that failed with a transient error is restarted (Conduit's error recovery).

    Durations may be given as :class:`~datetime.timedelta`, seconds, or strings such as ``"10m"``; they
    are stored as timedeltas (so the fields are typed as what they hold, the constructor as what it takes).

    :param min_delay: delay before the first restart (Conduit default 1s)
    :param max_delay: upper bound of a delay (default 10m)
    :param backoff_factor: growth of the delay per attempt (default 2)
    :param max_retries: restarts allowed inside ``max_retries_window``; ``-1`` is infinite (the default),
        ``0`` turns recovery off: a transient error then degrades the pipeline at once
    :param max_retries_window: the sliding window in which restarts count (default 5m)
    """

    min_delay: timedelta
    max_delay: timedelta
    backoff_factor: float
    max_retries: int
    max_retries_window: timedelta

    def __init__(
        self,
        min_delay: DurationLike = timedelta(seconds=1),
        max_delay: DurationLike = timedelta(minutes=10),
        backoff_factor: float | str = 2,
        max_retries: int | str = INFINITE_RETRIES,
        max_retries_window: DurationLike = timedelta(minutes=5),
    ) -> None:
        set_field = object.__setattr__  # frozen
        set_field(self, "min_delay", parse_duration(min_delay, name="min_delay"))
        set_field(self, "max_delay", parse_duration(max_delay, name="max_delay"))
        set_field(self, "max_retries_window", parse_duration(max_retries_window, name="max_retries_window"))
        factor = float(backoff_factor) if isinstance(backoff_factor, str) else backoff_factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isfinite(factor):
            raise ValueError(f"backoff_factor: expected a number, got {backoff_factor!r}")
        set_field(self, "backoff_factor", factor)
        retries = int(max_retries) if isinstance(max_retries, str) else max_retries
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise ValueError(f"max_retries: expected an integer, got {max_retries!r}")
        set_field(self, "max_retries", retries)
        self._validate()

    def _validate(self) -> None:
        # The rules of Conduit's pkg/conduit/config.go (validateErrorRecovery).
        errors = []
        if self.min_delay <= timedelta(0):
            errors.append(f"min_delay must be positive, got {format_duration(self.min_delay)}")
        if self.max_delay <= timedelta(0):
            errors.append(f"max_delay must be positive, got {format_duration(self.max_delay)}")
        elif self.min_delay > self.max_delay:
            errors.append(
                f"min_delay ({format_duration(self.min_delay)}) must not be greater than max_delay "
                f"({format_duration(self.max_delay)})"
            )
        if self.backoff_factor < 0:
            errors.append(f"backoff_factor must be >= 0, got {self.backoff_factor:g}")
        if self.max_retries < INFINITE_RETRIES:
            errors.append(f"max_retries must be >= -1, got {self.max_retries}")
        if self.max_retries_window <= timedelta(0):
            errors.append(
                f"max_retries_window must be positive, got {format_duration(self.max_retries_window)}"
            )
        if errors:
            raise ValueError("invalid recovery policy: " + "; ".join(errors))

    # ----------------------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """``False`` when ``max_retries`` is 0: a transient error then degrades the pipeline."""
        return self.max_retries != 0

    @property
    def infinite(self) -> bool:
        return self.max_retries == INFINITE_RETRIES

    def delay_for(self, attempt: int) -> timedelta:
        """The delay before restart number ``attempt`` (1-based) inside the window.

        :param attempt: 1 for the first restart, 2 for the second, ...
        """
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        min_s = self.min_delay.total_seconds()
        max_s = self.max_delay.total_seconds()
        try:
            seconds = min_s * float(self.backoff_factor) ** (attempt - 1)
        except OverflowError:
            seconds = max_s
        if not math.isfinite(seconds):
            seconds = max_s
        return timedelta(seconds=min(max_s, max(min_s, seconds)))

    def delays(self, attempts: int) -> list[timedelta]:
        """The delays of the first ``attempts`` restarts, for logs and docs."""
        return [self.delay_for(n) for n in range(1, attempts + 1)]

    # ----------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (durations in seconds); :meth:`from_dict` reads it back."""
        return {
            "min_delay": self.min_delay.total_seconds(),
            "max_delay": self.max_delay.total_seconds(),
            "backoff_factor": self.backoff_factor,
            "max_retries": self.max_retries,
            "max_retries_window": self.max_retries_window.total_seconds(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecoveryPolicy:
        return cls.from_settings(data)

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, Any], *, base: RecoveryPolicy | None = None
    ) -> RecoveryPolicy:
        """A policy from a mapping of settings; missing or empty ones come from ``base`` (or defaults).

        Keys may be spelled ``min_delay`` or Conduit's ``min-delay``. Unknown keys are an error.

        :param settings: the settings
        :param base: the policy whose values fill in what ``settings`` leaves out
        """
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = base.to_dict() if base is not None else {}
        for key, value in settings.items():
            name = key.strip().lower().replace("-", "_")
            if name not in known:
                raise ValueError(f"unknown recovery setting {key!r} (known: {', '.join(sorted(known))})")
            if value is None or (isinstance(value, str) and not value.strip()):
                continue
            values[name] = value
        return cls(**values)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        *,
        prefix: str = "AIRFLOW__CONDUIT__",
        base: RecoveryPolicy | None = None,
    ) -> RecoveryPolicy:
        """A policy from environment variables (``AIRFLOW__CONDUIT__MIN_DELAY`` ...), without Airflow.

        Lets ``airflow-conduit run --recover`` share the Airflow deployment's settings.
        """
        settings = {
            f.name: environ[prefix + f.name.upper()]
            for f in fields(cls)
            if prefix + f.name.upper() in environ
        }
        return cls.from_settings(settings, base=base)

    def describe(self) -> str:
        retries = "infinite" if self.infinite else str(self.max_retries)
        return (
            f"min_delay={format_duration(self.min_delay)} max_delay={format_duration(self.max_delay)} "
            f"backoff_factor={self.backoff_factor:g} max_retries={retries} "
            f"max_retries_window={format_duration(self.max_retries_window)}"
        )
