"""Provider metadata for Airflow's provider discovery (entry point ``apache_airflow_provider``).

Kept import-free: Airflow calls this while it initialises its configuration, before anything else of
this package may be imported.
"""

from __future__ import annotations

from typing import Any

_RECOVERY_OPTIONS: dict[str, dict[str, Any]] = {
    "min_delay": {
        "description": (
            "Delay before the first restart of a pipeline that failed with a transient error, as in "
            "Conduit's ``pipelines.error-recovery.min-delay``. Seconds, or a duration such as ``1s``, "
            "``500ms``, ``2m``.\n"
        ),
        "version_added": "0.1.0",
        "type": "string",
        "example": "1s",
        "default": "1s",
    },
    "max_delay": {
        "description": "Upper bound of the delay between restarts (Conduit's ``max-delay``).\n",
        "version_added": "0.1.0",
        "type": "string",
        "example": "10m",
        "default": "10m",
    },
    "backoff_factor": {
        "description": (
            "Multiplier of the delay per attempt: ``min_delay * backoff_factor ** (attempt - 1)``, "
            "capped at ``max_delay`` (Conduit's ``backoff-factor``).\n"
        ),
        "version_added": "0.1.0",
        "type": "float",
        "example": "2",
        "default": "2",
    },
    "max_retries": {
        "description": (
            "Restarts allowed inside ``max_retries_window`` before the pipeline is degraded; ``-1`` "
            "retries forever and ``0`` turns recovery off (Conduit's ``max-retries``).\n"
        ),
        "version_added": "0.1.0",
        "type": "integer",
        "example": "5",
        "default": "-1",
    },
    "max_retries_window": {
        "description": (
            "Sliding window over which restarts are counted; a restart older than the window stops "
            "counting (Conduit's ``max-retries-window``).\n"
        ),
        "version_added": "0.1.0",
        "type": "string",
        "example": "5m",
        "default": "5m",
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-conduit",
        "name": "Conduit",
        "description": (
            "Conduit-style streaming pipelines on Apache Spark: submit and watch pipelines, recover "
            "them with Conduit's backoff rules, and publish their dead-letter queues as assets.\n"
        ),
        "integrations": [
            {
                "integration-name": "Conduit",
                "external-doc-url": "https://conduit.io/docs/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {"integration-name": "Conduit", "python-modules": ["airflow_conduit.operators.pipeline"]}
        ],
        "sensors": [{"integration-name": "Conduit", "python-modules": ["airflow_conduit.sensors.pipeline"]}],
        "hooks": [
            {
                "integration-name": "Conduit",
                "python-modules": ["airflow_conduit.hooks.conduit", "airflow_conduit.hooks.asset_events"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Conduit",
                "python-modules": [
                    "airflow_conduit.triggers.recovery",
                    "airflow_conduit.triggers.status",
                ],
            }
        ],
        "asset-uris": [{"schemes": ["conduit"], "handler": "airflow_conduit.assets.sanitize_uri"}],
        "config": {
            "conduit": {
                "description": (
                    "Defaults of pipeline recovery (Conduit's ``pipelines.error-recovery.*``); an "
                    "operator's own ``recovery=`` overrides them. Environment: "
                    "``AIRFLOW__CONDUIT__MIN_DELAY`` and so on.\n"
                ),
                "options": {
                    **_RECOVERY_OPTIONS,
                    "deferral_threshold": {
                        "description": (
                            "A deferrable operator or sensor waits shorter than this in the worker and "
                            "defers only longer waits to the triggerer; a trigger never fires sooner than "
                            "this after its task deferred. It must cover the hand-over of a deferring "
                            "worker (its exit reaching the scheduler), or the resumed task can be failed "
                            "by its own earlier worker's exit. A duration such as ``30s``.\n"
                        ),
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "1m",
                        "default": "30s",
                    },
                    "state_dirs": {
                        "description": (
                            "State dirs the Conduit pages of the UI (``/conduit``) list pipelines from, "
                            "comma-separated. Empty: ``$CONDUIT_STATE_DIR``, else ``.conduit`` in the API "
                            "server's working directory.\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/data/conduit,/data/conduit-replay",
                        "default": "",
                    },
                },
            }
        },
    }
