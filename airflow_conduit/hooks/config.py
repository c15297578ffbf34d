"""The ``[conduit]`` section of Airflow's configuration as a :class:`RecoveryPolicy`.

The Airflow side's reader of the pure :class:`RecoveryPolicy`; the engine and the CLI never import it.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta

from airflow_conduit.recovery.policy import RecoveryPolicy, parse_duration

SECTION = "conduit"

DEFAULT_DEFERRAL_THRESHOLD = timedelta(seconds=30)
"""Waits shorter than this stay in the worker: a worker that defers takes seconds to exit (5 s measured
under ``airflow standalone``), and a trigger that fires before its exit reached the scheduler gets the
resumed task failed."""


def policy_from_airflow_config(*, base: RecoveryPolicy | None = None) -> RecoveryPolicy:
    """The recovery defaults of this Airflow deployment.

    Reads ``[conduit] min_delay, max_delay, backoff_factor, max_retries, max_retries_window`` (so also
    ``AIRFLOW__CONDUIT__MIN_DELAY`` and friends); options that are not set keep Conduit's defaults.

    :param base: the policy whose values fill in what the configuration leaves out
    """
    from airflow.providers.common.compat.sdk import conf

    settings = {}
    for f in fields(RecoveryPolicy):
        value = conf.get(SECTION, f.name, fallback=None)
        if value is not None:
            settings[f.name] = value
    return RecoveryPolicy.from_settings(settings, base=base)


def deferral_threshold_from_airflow_config() -> timedelta:
    """``[conduit] deferral_threshold``: the shortest wait worth deferring (default 30 s)."""
    from airflow.providers.common.compat.sdk import conf

    value = conf.get(SECTION, "deferral_threshold", fallback=None)
    if value in (None, ""):
        return DEFAULT_DEFERRAL_THRESHOLD
    threshold = parse_duration(value, name=f"[{SECTION}] deferral_threshold")
    if threshold < timedelta(0):
        raise ValueError(f"[{SECTION}] deferral_threshold must not be negative, got {value!r}")
    return threshold
