"""Exceptions of the Airflow side, classified as the engine classified the failure.

- :class:`PipelineTransientError` (exit code 75): retryable; Airflow's retries or
  :class:`~airflow_conduit.operators.retry_policy.ConduitRetryPolicy` decide.
- :class:`PipelineDegradedError` (exit code 1, or recovery gave up): an ``AirflowFailException``, so
  the task fails without retry - retrying will not help.
- :class:`PipelineConfigError` (exit code 2): an ``AirflowFailException`` as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_conduit.state import ExitPayload

if TYPE_CHECKING:
    from airflow_conduit.recovery.policy import RecoveryPolicy


class ConduitPipelineError(AirflowException):
    """A pipeline run that did not stop gracefully.

    :param message: what happened
    :param pipeline_id: the pipeline
    :param state_dir: its state dir
    :param payload: the run's exit payload (``exit_code``, ``error``, ``records``, ...); kept as its JSON
        in :attr:`payload`
    :param recovery: the recovery policy in force, for a retry policy to pick up
    """

    def __init__(
        self,
        message: str,
        *,
        pipeline_id: str,
        state_dir: str,
        payload: ExitPayload | Mapping[str, Any] | None = None,
        recovery: RecoveryPolicy | None = None,
    ) -> None:
        super().__init__(message)
        self.pipeline_id = pipeline_id
        self.state_dir = str(state_dir)
        self.payload: dict[str, Any] = (
            payload.to_dict() if isinstance(payload, ExitPayload) else dict(payload or {})
        )
        self.recovery = recovery

    @property
    def exit_payload(self) -> ExitPayload | None:
        """The exit payload as an :class:`~airflow_conduit.state.ExitPayload` (``None`` without one)."""
        return ExitPayload.from_dict(self.payload) if self.payload else None

    @property
    def error(self) -> dict[str, Any]:
        return dict(self.payload.get("error") or {})

    @property
    def exit_code(self) -> int | None:
        code = self.payload.get("exit_code")
        return int(code) if code is not None else None

    def __reduce__(self):  # keyword-only arguments: pickle by rebuilding
        return (
            _rebuild,
            (type(self), str(self), self.pipeline_id, self.state_dir, self.payload, self.recovery),
        )


class PipelineTransientError(ConduitPipelineError):
    """The pipeline failed with a transient error: a restart may succeed (retryable)."""


class PipelineFatalError(AirflowFailException, ConduitPipelineError):
    """The pipeline cannot go on; the task fails without retry."""


class PipelineDegradedError(PipelineFatalError):
    """The pipeline is degraded: a fatal error, or recovery used up its ``max_retries`` window."""


class PipelineConfigError(PipelineFatalError):
    """The pipeline file or the command line is invalid (engine exit code 2)."""


def _rebuild(cls, message, pipeline_id, state_dir, payload, recovery):
    return cls(message, pipeline_id=pipeline_id, state_dir=state_dir, payload=payload, recovery=recovery)
