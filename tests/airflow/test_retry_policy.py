"""ConduitRetryPolicy.evaluate, the way Airflow's task runner calls it after a failure."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk.definitions.retry_policy import RetryAction

from airflow_conduit.hooks.exceptions import PipelineTransientError
from airflow_conduit.operators import ConduitRetryPolicy
from airflow_conduit.recovery import RecoveryPolicy
from airflow_conduit.state import PipelineState

PAYLOAD = {
    "exit_code": 75,
    "error": {"kind": "transient", "code": "source_failed", "message": "x", "node": "p:s"},
}


def failure(tmp_path, recovery=None) -> PipelineTransientError:
    return PipelineTransientError(
        "down", pipeline_id="p", state_dir=str(tmp_path), payload=PAYLOAD, recovery=recovery
    )


def test_retries_with_conduit_delays_then_fails(tmp_path):
    policy = ConduitRetryPolicy(RecoveryPolicy(min_delay=1, max_retries=2))
    first = policy.evaluate(failure(tmp_path), try_number=1, max_tries=10)
    second = policy.evaluate(failure(tmp_path), try_number=2, max_tries=10)
    third = policy.evaluate(failure(tmp_path), try_number=3, max_tries=10)
    assert (first.action, first.retry_delay) == (RetryAction.RETRY, timedelta(seconds=1))
    assert (second.action, second.retry_delay) == (RetryAction.RETRY, timedelta(seconds=2))
    assert third.action == RetryAction.FAIL and "max_retries=2" in third.reason
    assert PipelineState.of(tmp_path, "p").read_status()["status"] == "degraded"


def test_takes_the_operators_policy_when_it_has_none(tmp_path):
    decision = ConduitRetryPolicy().evaluate(
        failure(tmp_path, RecoveryPolicy(min_delay=5, max_retries=1)), try_number=1, max_tries=3
    )
    assert decision.retry_delay == timedelta(seconds=5)


def test_other_exceptions_get_airflows_default(tmp_path):
    assert (
        ConduitRetryPolicy().evaluate(ValueError("x"), try_number=1, max_tries=3).action
        == RetryAction.DEFAULT
    )


def test_no_airflow_retries_left_degrades(tmp_path):
    decision = ConduitRetryPolicy(RecoveryPolicy()).evaluate(failure(tmp_path), try_number=1, max_tries=0)
    assert decision.action == RetryAction.FAIL
    status = PipelineState.of(tmp_path, "p").read_status()
    assert status["status"] == "degraded" and status["error"]["code"] == "cannot_recover"


def test_serialize_round_trip():
    policy = ConduitRetryPolicy(RecoveryPolicy(min_delay=2, max_retries=4))
    again = ConduitRetryPolicy.deserialize(policy.serialize())
    assert again.recovery == policy.recovery
    assert ConduitRetryPolicy.deserialize(ConduitRetryPolicy().serialize()).recovery is None
