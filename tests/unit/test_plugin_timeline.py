"""The recovery timeline (plugins/timeline.py) from audit logs written by the real recovery code."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_conduit.plugins.timeline import runs, timeline
from airflow_conduit.recovery.history import PipelineRecovery, cancel_recovery
from airflow_conduit.recovery.policy import RecoveryPolicy
from airflow_conduit.state import PipelineState, parse_time

ERROR = {"kind": "transient", "code": "source_failed", "message": "connection reset", "node": "orders:in"}
FATAL = {"kind": "fatal", "code": "processor_failed", "message": "bad record", "node": "orders:fix"}
AIRFLOW = {"dag_id": "orders", "run_id": "manual__1", "task_id": "run", "try_number": 1, "map_index": -1}


@pytest.fixture
def state(tmp_path) -> PipelineState:
    return PipelineState.of(tmp_path, "orders")


def recovery(state: PipelineState, max_retries: int = 5) -> PipelineRecovery:
    policy = RecoveryPolicy(
        min_delay=timedelta(seconds=2),
        max_delay=timedelta(minutes=1),
        backoff_factor=2,
        max_retries=max_retries,
        max_retries_window=timedelta(minutes=10),
    )
    return PipelineRecovery(state, policy)


def engine_run(state: PipelineState, error: dict | None, **started) -> dict:
    """What the engine writes for one run (engine/job.py: start() and finish()); returns the exit payload."""
    state.audit("started", mode="continuous", **started)
    if error is None:
        state.audit("stopped", records={"read": 3, "written": {"orders:out": 3}})
        return {"status": "stopped", "error": None, "records": {"read": 3}}
    state.audit(
        "fault",
        classification=error["kind"],
        code=error["code"],
        message=error["message"],
        node=error["node"],
    )
    if error["kind"] == "fatal":
        state.audit("degraded", error=error)
    return {"status": "failed", "error": error, "records": {}}


def test_restarts_show_as_runs_with_faults_and_backoffs(state):
    rec = recovery(state)
    rec.on_failure(engine_run(state, ERROR, airflow=AIRFLOW))
    rec.mark_restarted()
    rec.on_failure(engine_run(state, ERROR))
    rec.mark_restarted()
    rec.on_success(engine_run(state, None))

    found = runs(state.read_audit())
    assert [r.end for r in found] == ["recovering", "recovering", "stopped"]
    assert [r.attempt for r in found] == [None, 1, 2]
    assert [b.attempt for b in (found[0].backoff, found[1].backoff)] == [1, 2]
    assert [b.delay for b in (found[0].backoff, found[1].backoff)] == [2.0, 4.0]
    assert found[2].backoff is None
    assert dict(found[0].airflow or {}) == AIRFLOW and found[1].airflow is None
    for run in found[:2]:
        assert [(f.kind, f.code, f.node, f.message) for f in run.faults] == [
            ("transient", "source_failed", "orders:in", "connection reset")
        ]
        assert run.backoff.restarted
    # On one axis: each wait begins after its run ended and ends before the next run starts.
    for run, after in zip(found, found[1:], strict=False):
        assert parse_time(run.started_at) <= parse_time(run.ended_at) <= parse_time(run.backoff.start)
        assert parse_time(run.backoff.start) <= parse_time(run.backoff.until) <= parse_time(after.started_at)
    assert found[2].faults == []


def test_a_wait_in_progress_ends_at_the_planned_start(state):
    rec = recovery(state)
    rec.on_failure(engine_run(state, ERROR))
    (run,) = timeline(state.read_audit())["runs"]
    assert run["end"] == "recovering"
    assert run["backoff"]["until"] == state.read_status()["next_start_at"]
    waited = parse_time(run["backoff"]["until"]) - parse_time(run["backoff"]["from"])
    assert abs(waited.total_seconds() - run["backoff"]["delay"]) < 1
    assert run["backoff"]["restarted"] is False
    assert set(run["backoff"]) >= {"attempt", "delay", "from", "until"}


def test_recovery_giving_up_degrades_the_run(state):
    rec = recovery(state, max_retries=1)
    rec.on_failure(engine_run(state, ERROR))
    rec.mark_restarted()
    rec.on_failure(engine_run(state, ERROR))  # the one retry is used up

    first, second = runs(state.read_audit())
    assert (first.end, second.end) == ("recovering", "degraded")
    assert second.backoff is None
    # The run's own fault is kept, not the "cannot recover" reason of the degraded event.
    assert [f.code for f in second.faults] == ["source_failed"]


def test_a_fatal_run_and_a_failure_nobody_recovers(state):
    rec = recovery(state)
    rec.on_fatal(engine_run(state, FATAL))
    engine_run(state, ERROR)  # run by hand, without --recover: nobody decides a restart

    fatal, failed = runs(state.read_audit())
    assert (fatal.end, failed.end) == ("degraded", "failed")
    assert [(f.kind, f.code) for f in fatal.faults] == [("fatal", "processor_failed")]
    assert fatal.ended_at is not None and failed.ended_at is not None


def test_a_stop_during_the_wait_cancels_the_restart(state):
    rec = recovery(state)
    rec.on_failure(engine_run(state, ERROR))
    cancel_recovery(rec)

    (run,) = runs(state.read_audit())
    assert run.end == "stopped"
    assert run.backoff is not None and run.backoff.cancelled and not run.backoff.restarted
    assert run.backoff.until == state.read_audit()[-1]["time"]


def test_killed_engines_refused_runs_and_invalid_files(state):
    state.audit("degraded", error={"kind": "fatal", "code": "invalid_config", "message": "bad file"})
    state.audit("started", mode="until_idle")  # killed: no end event
    state.audit("delivery_skipped", batch=3, destinations=["out"])
    state.audit("started", mode="until_idle")
    state.audit("refused", code="pipeline_locked", holder={"pid": 1, "host": "h"})
    state.audit("acked", position="p", source=None, reason="", user="u")

    invalid, killed, running, refused = runs(state.read_audit())
    assert (invalid.end, invalid.faults[0].code) == ("degraded", "invalid_config")
    assert killed.end == "failed"
    assert killed.ended_at == state.read_audit()[2]["time"]  # its last event
    assert (running.end, running.ended_at) == ("running", None)
    assert refused.end == "refused" and refused.started_at == refused.ended_at
    assert [f.code for f in refused.faults] == ["pipeline_locked"]


def test_no_events_no_runs(state):
    assert timeline(state.read_audit()) == {"runs": []}
