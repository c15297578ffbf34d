"""A retry policy for Airflow 3.3's ``retry_policy=`` that applies Conduit's recovery rules.

Airflow evaluates it in the worker after a task failed. A transient pipeline failure
(:class:`~airflow_conduit.hooks.exceptions.PipelineTransientError`) is retried after the policy's delay
while the window allows, and failed (degraded) once it does not; fatal failures raise an
``AirflowFailException`` subclass and never reach the policy. Every other exception gets Airflow's
default handling. The restart history is the same one the deferrable operator uses, in the state dir.

Airflow cannot retry more often than the task's ``retries``: give the task enough of them (the
operator raises ``retries`` to a large number when it sees this policy and ``retries`` was not set).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from airflow_conduit.errors import PipelineError
from airflow_conduit.recovery.decision import CANNOT_RECOVER
from airflow_conduit.recovery.history import PipelineRecovery
from airflow_conduit.recovery.policy import RecoveryPolicy
from airflow_conduit.state import PipelineState

if TYPE_CHECKING:
    from airflow.sdk import Context


class ConduitRetryPolicy(RetryPolicy):
    """Airflow retries with Conduit's backoff and ``max_retries`` window.

    :param recovery: the rules; ``None`` takes the failing operator's ``recovery=`` and, failing
        that, the ``[conduit]`` configuration section
    """

    def __init__(self, recovery: RecoveryPolicy | None = None) -> None:
        self.recovery = recovery

    def resolve(self, exception: BaseException) -> RecoveryPolicy:
        if self.recovery is not None:
            return self.recovery
        policy = getattr(exception, "recovery", None)
        if isinstance(policy, RecoveryPolicy):
            return policy
        from airflow_conduit.hooks.config import policy_from_airflow_config

        return policy_from_airflow_config()

    def evaluate(
        self,
        exception: BaseException,
        try_number: int,
        max_tries: int,
        context: Context | None = None,
    ) -> RetryDecision:
        from airflow_conduit.hooks.exceptions import PipelineTransientError

        if not isinstance(exception, PipelineTransientError):
            return RetryDecision.default()
        policy = self.resolve(exception)
        state = PipelineState.of(exception.state_dir, exception.pipeline_id)
        log = getattr(context.get("ti"), "log", None) if context else None
        recovery = PipelineRecovery(state, policy, log=log)
        if try_number > max_tries:
            # Airflow has no retry left whatever we say: the pipeline is degraded.
            message = f"the task has no retries left (retries={max_tries}); raise `retries`"
            error = PipelineError("fatal", CANNOT_RECOVER, message, exception.error.get("node"))
            recovery.on_fatal({"error": error.to_dict()})
            return RetryDecision.fail(reason="no Airflow retries left")
        decision = recovery.on_failure(exception.payload)
        if not decision.restart:
            return RetryDecision.fail(reason=f"pipeline {exception.pipeline_id} degraded: {decision.reason}")
        return RetryDecision.retry(delay=decision.delay, reason=decision.reason)

    def serialize(self) -> dict[str, Any]:
        return {
            "__type": "ConduitRetryPolicy",
            "recovery": self.recovery.to_dict() if self.recovery is not None else None,
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> ConduitRetryPolicy:
        recovery = data.get("recovery")
        return cls(RecoveryPolicy.from_dict(recovery) if recovery else None)

    def __repr__(self) -> str:
        return f"ConduitRetryPolicy({self.recovery!r})"
