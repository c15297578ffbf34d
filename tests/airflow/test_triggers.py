"""Triggers: serialize round-trip, and what their run() yields."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from airflow_conduit.recovery.decision import format_time
from airflow_conduit.state import PipelineState
from airflow_conduit.triggers.recovery import PipelineRecoveryTrigger
from airflow_conduit.triggers.status import PipelineStatusTrigger, check_pipeline


def first_event(trigger, timeout: float = 20):
    async def go():
        async for event in trigger.run():
            return event

    return asyncio.run(asyncio.wait_for(go(), timeout))


def round_trip(trigger):
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    again = cls(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    return classpath, kwargs


def test_recovery_trigger_serialize_round_trip(tmp_path):
    start = datetime(2026, 1, 1, 12, 0, 1, tzinfo=UTC)
    t = PipelineRecoveryTrigger(
        pipeline_id="orders",
        state_dir=str(tmp_path),
        start_at=start,
        attempt=3,
        delay=4.0,
        carry={"runs": [{"exit_code": 75}]},
    )
    classpath, kwargs = round_trip(t)
    assert classpath == "airflow_conduit.triggers.recovery.PipelineRecoveryTrigger"
    assert kwargs == {
        "pipeline_id": "orders",
        "state_dir": str(tmp_path),
        "start_at": "2026-01-01T12:00:01.000000Z",
        "attempt": 3,
        "delay": 4.0,
        "poll_interval": 1.0,
        "carry": {"runs": [{"exit_code": 75}]},
        "not_before": None,
    }


def test_recovery_trigger_accepts_iso_strings_and_naive_is_utc(tmp_path):
    a = PipelineRecoveryTrigger(
        pipeline_id="p", state_dir=str(tmp_path), start_at="2026-01-01T12:00:00Z", attempt=1, delay=1
    )
    b = PipelineRecoveryTrigger(
        pipeline_id="p", state_dir=str(tmp_path), start_at="2026-01-01T12:00:00+00:00", attempt=1, delay=1
    )
    assert a.serialize() == b.serialize()


def test_recovery_trigger_fires_at_start_time(tmp_path):
    start = datetime.now(UTC) + timedelta(seconds=1.5)
    t = PipelineRecoveryTrigger(
        pipeline_id="p",
        state_dir=str(tmp_path),
        start_at=start,
        attempt=2,
        delay=1.5,
        poll_interval=0.2,
        carry={"runs": [1]},
    )
    began = time.monotonic()
    event = first_event(t)
    elapsed = time.monotonic() - began
    assert event.payload["status"] == "restart"
    assert event.payload["attempt"] == 2 and event.payload["carry"] == {"runs": [1]}
    assert 1.0 <= elapsed < 5
    fired = datetime.fromisoformat(event.payload["fired_at"].replace("Z", "+00:00"))
    assert fired >= start


def test_recovery_trigger_in_the_past_fires_at_once(tmp_path):
    t = PipelineRecoveryTrigger(
        pipeline_id="p",
        state_dir=str(tmp_path),
        start_at=datetime.now(UTC) - timedelta(hours=1),
        attempt=1,
        delay=1,
    )
    began = time.monotonic()
    assert first_event(t).payload["status"] == "restart"
    assert time.monotonic() - began < 1


def test_recovery_trigger_stops_on_stop_request(tmp_path):
    state = PipelineState.of(tmp_path, "p")
    state.request_stop()
    t = PipelineRecoveryTrigger(
        pipeline_id="p",
        state_dir=str(tmp_path),
        start_at=datetime.now(UTC) + timedelta(hours=1),
        attempt=1,
        delay=3600,
    )
    assert first_event(t).payload["status"] == "stop_requested"


def parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def test_recovery_trigger_holds_even_a_stop_until_the_deferring_worker_has_handed_over(tmp_path):
    """A stop requested right after the task deferred must not resume it before ``not_before``."""
    state = PipelineState.of(tmp_path, "p")
    state.request_stop()
    hand_over = datetime.now(UTC) + timedelta(seconds=1.5)
    t = PipelineRecoveryTrigger(
        pipeline_id="p",
        state_dir=str(tmp_path),
        start_at=datetime.now(UTC) + timedelta(hours=1),
        attempt=1,
        delay=3600,
        not_before=format_time(hand_over),
    )
    assert round_trip(t)[1]["not_before"] == format_time(hand_over)
    event = first_event(t)
    assert event.payload["status"] == "stop_requested"
    assert parse(event.payload["fired_at"]) >= hand_over


# status ------------------------------------------------------------------------------------------
def test_status_trigger_holds_a_final_status_until_the_hand_over_and_looks_again(tmp_path):
    state = PipelineState.of(tmp_path, "p")
    state.write_status("stopped")
    hand_over = datetime.now(UTC) + timedelta(seconds=1.5)
    t = PipelineStatusTrigger(
        pipeline_id="p", state_dir=str(tmp_path), poll_interval=0.1, not_before=format_time(hand_over)
    )
    assert round_trip(t)[1]["not_before"] == format_time(hand_over)
    event = first_event(t)
    assert event.payload["status"] == "stopped"
    assert parse(event.payload["checked_at"]) >= hand_over  # the status it reports was read after it


def test_status_trigger_serialize_round_trip(tmp_path):
    t = PipelineStatusTrigger(
        pipeline_id="clicks", state_dir=str(tmp_path), poll_interval=2, newer_than="2026-01-01T00:00:00+00:00"
    )
    classpath, kwargs = round_trip(t)
    assert classpath == "airflow_conduit.triggers.status.PipelineStatusTrigger"
    assert kwargs["newer_than"] == "2026-01-01T00:00:00.000000Z"
    assert round_trip(PipelineStatusTrigger(pipeline_id="x", state_dir="/s"))[1]["newer_than"] is None


def test_status_trigger_waits_for_a_final_status(tmp_path):
    state = PipelineState.of(tmp_path, "p")
    state.write_status("running")

    async def go():
        task = asyncio.ensure_future(
            anext(PipelineStatusTrigger(pipeline_id="p", state_dir=str(tmp_path), poll_interval=0.1).run())
        )
        await asyncio.sleep(0.5)
        assert not task.done()
        state.write_exit_payload(
            {"pipeline": "p", "status": "stopped", "exit_code": 0, "records": {"acked": 3}}
        )
        state.write_status("stopped")
        return await asyncio.wait_for(task, 5)

    event = asyncio.run(go())
    assert event.payload["status"] == "stopped" and event.payload["terminal"]
    assert event.payload["payload"]["records"] == {"acked": 3}


@pytest.mark.parametrize(
    ("status", "age", "terminal"),
    [
        ("running", 100, False),
        ("recovering", 100, False),
        ("stopped", 0, True),
        ("degraded", 0, True),
        ("failed", 1, False),  # recovery may be about to take over
        ("failed", 30, True),
    ],
)
def test_check_pipeline(tmp_path, status, age, terminal):
    state = PipelineState.of(tmp_path, "p")
    state.write_status(status)
    now = datetime.now(UTC) + timedelta(seconds=age)
    result = check_pipeline(state, failed_grace=10, now=now)
    assert result["status"] == status and result["terminal"] is terminal


def test_check_pipeline_ignores_an_earlier_runs_status(tmp_path):
    state = PipelineState.of(tmp_path, "p")
    state.write_status("stopped")
    later = datetime.now(UTC) + timedelta(seconds=5)
    result = check_pipeline(state, newer_than=later)
    assert result["status"] == "unknown" and not result["terminal"]
    assert check_pipeline(state)["terminal"]


def test_check_pipeline_with_only_an_exit_payload(tmp_path):
    state = PipelineState.of(tmp_path, "p")
    state.write_exit_payload(
        {
            "pipeline": "p",
            "status": "degraded",
            "exit_code": 1,
            "ended_at": format_time(datetime.now(UTC)),
            "error": {"kind": "fatal", "code": "x", "message": "m"},
        }
    )
    result = check_pipeline(state)
    assert result["status"] == "degraded" and result["terminal"]
