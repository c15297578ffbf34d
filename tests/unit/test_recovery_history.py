"""Recovery bookkeeping in the state dir, and the in-process restart loop, with a fake clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from airflow_conduit.recovery import PipelineRecovery, RecoveryPolicy, classify, run_with_recovery
from airflow_conduit.state import PipelineState

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def transient(acked: int = 0) -> dict:
    return {
        "pipeline": "p",
        "status": "failed",
        "exit_code": 75,
        "error": {"kind": "transient", "code": "source_failed", "message": "boom", "node": "p:src"},
        "records": {"read": acked, "acked": acked, "filtered": 0, "nacked": 0, "dlq": 0, "written": {}},
    }


def fatal() -> dict:
    return {
        "pipeline": "p",
        "status": "degraded",
        "exit_code": 1,
        "error": {"kind": "fatal", "code": "processor_fatal", "message": "bad", "node": "p:proc"},
        "records": {},
    }


STOPPED = {"pipeline": "p", "status": "stopped", "exit_code": 0, "error": None, "records": {"acked": 3}}


@pytest.fixture
def state(tmp_path):
    return PipelineState.of(tmp_path, "p")


def events(state: PipelineState) -> list[str]:
    return [e["event"] for e in state.read_audit()]


def test_failure_writes_recovering_status_audit_and_history(state):
    clock = Clock()
    rec = PipelineRecovery(state, RecoveryPolicy(max_retries=3), clock=clock)
    d = rec.on_failure(transient())
    assert d.restart and d.attempt == 1
    status = state.read_status()
    assert status["status"] == "recovering"
    assert status["attempt"] == 1 and status["delay"] == 1.0
    assert status["next_start_at"] == "2026-01-01T12:00:01.000000Z"
    assert status["error"]["code"] == "source_failed"
    assert events(state) == ["recovering"]
    saved = json.loads((state.root / "recovery.json").read_text())
    assert [r["attempt"] for r in saved["restarts"]] == [1]
    assert rec.pending_restart() is not None


def test_history_survives_a_new_process(state):
    clock = Clock()
    PipelineRecovery(state, RecoveryPolicy(max_retries=3), clock=clock).on_failure(transient())
    clock.advance(10)
    d = PipelineRecovery(state, RecoveryPolicy(max_retries=3), clock=clock).on_failure(transient())
    assert d.attempt == 2 and d.delay == timedelta(seconds=2)


def test_mark_restarted_audits_once(state):
    clock = Clock()
    rec = PipelineRecovery(state, RecoveryPolicy(), clock=clock)
    assert rec.mark_restarted() is None  # nothing pending: a first run
    rec.on_failure(transient())
    clock.advance(1)
    r = rec.mark_restarted()
    assert r is not None and r.attempt == 1 and r.restarted_at == clock.now
    assert rec.mark_restarted() is None
    assert events(state) == ["recovering", "restarted"]


def test_degraded_after_max_retries_with_reason(state):
    clock = Clock()
    rec = PipelineRecovery(state, RecoveryPolicy(max_retries=1), clock=clock)
    assert rec.on_failure(transient()).restart
    clock.advance(5)
    rec.mark_restarted()
    d = rec.on_failure(transient())
    assert not d.restart
    status = state.read_status()
    assert status["status"] == "degraded"
    assert status["error"]["code"] == "cannot_recover"
    assert "last error: source_failed" in status["error"]["message"]
    assert events(state) == ["recovering", "restarted", "degraded"]


def test_fatal_degrades_once(state):
    rec = PipelineRecovery(state, RecoveryPolicy(), clock=Clock())
    rec.on_fatal(fatal())
    rec.on_fatal(fatal())
    assert state.read_status()["status"] == "degraded"
    assert state.read_status()["error"]["code"] == "processor_fatal"
    assert events(state) == ["degraded"]


def test_expired_restarts_are_pruned_and_do_not_count(state):
    clock = Clock()
    policy = RecoveryPolicy(max_retries=1, max_retries_window=60)
    rec = PipelineRecovery(state, policy, clock=clock)
    rec.on_failure(transient())
    rec.mark_restarted()
    clock.advance(120)
    d = rec.on_failure(transient())
    assert d.restart and d.attempt == 1
    saved = json.loads((state.root / "recovery.json").read_text())
    assert len(saved["restarts"]) == 1  # the old one was pruned


def test_progress_before_failure_resets(state):
    clock = Clock()
    rec = PipelineRecovery(state, RecoveryPolicy(max_retries=1), clock=clock)
    rec.on_failure(transient())
    rec.mark_restarted()
    clock.advance(3)
    d = rec.on_failure(transient(acked=5))  # the restarted run processed records, then failed
    assert d.restart and d.attempt == 1 and d.reset


def test_graceful_stop_clears_history(state):
    clock = Clock()
    rec = PipelineRecovery(state, RecoveryPolicy(max_retries=2), clock=clock)
    rec.on_failure(transient())
    rec.mark_restarted()
    rec.on_success(STOPPED)
    assert rec.history() == []
    assert rec.on_failure(transient()).attempt == 1


def test_classify():
    assert classify(STOPPED) == "stopped"
    assert classify(fatal()) == "fatal"
    assert classify(transient()) == "transient"
    assert classify({"exit_code": 2}) == "fatal"
    assert classify({"exit_code": 137}) == "transient"
    assert classify({"exit_code": 75, "error": {"kind": "fatal"}}) == "fatal"


# the loop ----------------------------------------------------------------------------------------
def scripted(*payloads):
    it = iter(payloads)
    calls = []

    def run_once():
        calls.append(1)
        return next(it)

    return run_once, calls


def test_loop_recovers_transient_failure(state):
    clock = Clock()
    run_once, calls = scripted(transient(), transient(), STOPPED)
    rec = PipelineRecovery(state, RecoveryPolicy(min_delay=1, max_retries=5), clock=clock)
    result = run_with_recovery(run_once, rec, sleep=clock.sleep)
    assert result.outcome == "stopped"
    assert len(calls) == 3 and result.restarts == 2
    assert [d.delay.total_seconds() for d in result.decisions] == [1, 2]
    assert sum(clock.sleeps) == pytest.approx(3)
    assert events(state) == ["recovering", "restarted", "recovering", "restarted"]
    assert rec.history() == []  # cleared by the graceful stop


def test_loop_never_clearing_failure_runs_one_plus_max_retries(state):
    clock = Clock()
    run_once, calls = scripted(*[transient()] * 10)
    rec = PipelineRecovery(state, RecoveryPolicy(min_delay=1, max_delay=3, max_retries=3), clock=clock)
    result = run_with_recovery(run_once, rec, sleep=clock.sleep)
    assert result.outcome == "degraded"
    assert len(calls) == 4
    assert [d.delay.total_seconds() for d in result.decisions if d.restart] == [1, 2, 3]
    assert state.read_status()["status"] == "degraded"


def test_loop_fatal_does_not_restart(state):
    run_once, calls = scripted(fatal(), STOPPED)
    result = run_with_recovery(run_once, PipelineRecovery(state, RecoveryPolicy(), clock=Clock()))
    assert result.outcome == "degraded" and len(calls) == 1 and result.decisions == []


def test_loop_recovery_off(state):
    run_once, calls = scripted(transient(), STOPPED)
    result = run_with_recovery(
        run_once, PipelineRecovery(state, RecoveryPolicy(max_retries=0), clock=Clock())
    )
    assert result.outcome == "degraded" and len(calls) == 1


def test_stop_requested_during_backoff_cancels_restart(state):
    clock = Clock()
    run_once, calls = scripted(transient(), STOPPED)
    rec = PipelineRecovery(state, RecoveryPolicy(min_delay=30, max_delay=60), clock=clock)

    def sleep(seconds):
        clock.sleep(seconds)
        state.request_stop()

    result = run_with_recovery(run_once, rec, sleep=sleep)
    assert result.outcome == "cancelled" and len(calls) == 1
    assert state.read_status()["status"] == "stopped"
    assert not state.stop_requested
    assert events(state)[-1] == "stopped"
