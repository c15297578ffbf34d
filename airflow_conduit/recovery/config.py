"""The ``[conduit]`` section of Airflow's configuration as a :class:`RecoveryPolicy`.

Airflow is imported only when this is called, so the CLI can use the rest of ``recovery`` without it.
"""

from __future__ import annotations

from dataclasses import fields

from airflow_conduit.recovery.policy import RecoveryPolicy

SECTION = "conduit"


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
