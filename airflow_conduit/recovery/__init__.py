"""Pipeline recovery: Conduit's backoff and restart window, shared by the CLI and the Airflow side.

Pure Python, no Spark and no Airflow (import-linter checks it): the Airflow side wraps it in
:class:`~airflow_conduit.operators.retry_policy.ConduitRetryPolicy` and reads the ``[conduit]`` section
in :mod:`airflow_conduit.hooks.config`.
"""

from __future__ import annotations

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
