"""Pipeline recovery: Conduit's backoff and restart window, shared by the CLI and the Airflow side.

Pure Python; :class:`ConduitRetryPolicy` (which needs Airflow) and :func:`policy_from_airflow_config`
are loaded on first use only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_conduit.recovery.decision import (
    CANNOT_RECOVER,
    RecoveryDecision,
    Restart,
    decide,
    made_progress,
)
from airflow_conduit.recovery.history import PipelineRecovery, cancel_recovery
from airflow_conduit.recovery.policy import INFINITE_RETRIES, RecoveryPolicy, format_duration, parse_duration
from airflow_conduit.recovery.runner import RecoveryResult, classify, run_with_recovery

if TYPE_CHECKING:
    from airflow_conduit.recovery.config import policy_from_airflow_config  # noqa: F401
    from airflow_conduit.recovery.retry_policy import ConduitRetryPolicy  # noqa: F401

__all__ = [
    "CANNOT_RECOVER",
    "INFINITE_RETRIES",
    "PipelineRecovery",
    "RecoveryDecision",
    "RecoveryPolicy",
    "RecoveryResult",
    "Restart",
    "cancel_recovery",
    "classify",
    "decide",
    "format_duration",
    "made_progress",
    "parse_duration",
    "run_with_recovery",
]

_LAZY = {
    "ConduitRetryPolicy": "airflow_conduit.recovery.retry_policy",
    "policy_from_airflow_config": "airflow_conduit.recovery.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
