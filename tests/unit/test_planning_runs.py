"""Stopping Spark's idle planners saves memory only: it must never fail the batch it runs in."""

from __future__ import annotations

from airflow_conduit.engine.planners import PlanningRuns


class _GatewayGone:
    """A session whose JVM cannot be reached (the failure injected)."""

    @property
    def _jvm(self):
        raise ConnectionError("the Py4J gateway is gone")


class _Run:
    query = None


def test_a_failure_to_stop_the_planners_does_not_reach_the_batch():
    runs, run = PlanningRuns(), _Run()
    runs.started(run)
    runs.planned(_GatewayGone(), run)  # type: ignore[arg-type]
    assert not runs.waits_for(run)


class _CountingSession:
    """A session that counts each reach for its JVM (each would stop processes)."""

    def __init__(self) -> None:
        self.reached = 0

    @property
    def _jvm(self):
        self.reached += 1
        raise ConnectionError("not a real JVM")


def test_the_planners_stay_while_another_run_may_still_plan():
    runs, first, second, session = PlanningRuns(), _Run(), _Run(), _CountingSession()
    runs.started(first)
    runs.started(second)
    runs.planned(session, first)  # type: ignore[arg-type]
    assert session.reached == 0 and runs.waits_for(second)
    runs.planned(session, second)  # type: ignore[arg-type]
    assert session.reached == 1 and not runs.waits_for(second)


def test_the_workers_are_stopped_once_per_process():
    runs, first, later, session = PlanningRuns(), _Run(), _Run(), _CountingSession()
    runs.started(first)
    runs.planned(session, first)  # type: ignore[arg-type]
    assert session.reached == 1 and runs.stopped
    runs.started(later)
    assert not runs.waits_for(later)  # the engine then skips looking at its batches
    runs.planned(session, later)  # type: ignore[arg-type]
    assert session.reached == 1
