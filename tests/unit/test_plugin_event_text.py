"""Audit events in words (plugins/event_text.py), from events the real state and recovery code writes."""

from __future__ import annotations

from datetime import timedelta

from airflow_conduit.plugins.event_text import describe, details, duration_text
from airflow_conduit.recovery.history import PipelineRecovery
from airflow_conduit.recovery.policy import RecoveryPolicy
from airflow_conduit.state import PipelineState

ERROR = {"kind": "transient", "code": "source_failed", "message": "connection reset", "node": "orders:in"}


def test_recovery_events_in_words(tmp_path):
    state = PipelineState.of(tmp_path, "orders")
    policy = RecoveryPolicy(min_delay=timedelta(seconds=2), backoff_factor=2, max_retries=1)
    rec = PipelineRecovery(state, policy)
    rec.on_failure({"error": ERROR, "records": {}})
    rec.mark_restarted()
    rec.on_failure({"error": ERROR, "records": {}})  # the one retry is used up
    texts = [describe(e) for e in state.read_audit()]
    assert texts[0] == "Restart attempt 1 scheduled in 2 s after a transient error source_failed at orders:in"
    assert texts[1] == "Restart attempt 1 began after a wait of 2 s"
    assert texts[2].startswith("Degraded: ") and "retrying will not help" in texts[2]
    assert "{" not in "".join(texts)  # words, not JSON


def test_engine_ack_and_replay_events_in_words(tmp_path):
    state = PipelineState.of(tmp_path, "orders")
    state.audit(
        "started",
        mode="until_idle",
        master="local[2]",
        airflow={"dag_id": "shop", "task_id": "orders", "run_id": "manual__1", "try_number": 2},
    )
    state.audit("fault", classification="fatal", code="processor_failed", message="bad", node="orders:fix")
    state.audit("stopped", records={"read": 10, "written": {"a": 7, "b": 1}, "filtered": 2, "dlq": 0})
    state.ack(b"file.jsonl:42", reason="duplicate order", user="alice", source="in")
    state.audit(
        "replayed", user="bob", replayed=3, delivered=2, filtered=0, failed_again=1, remaining=0, error=None
    )
    state.audit("refused", code="pipeline_locked", holder={"pid": 7, "host": "w1", "owner": "shop.orders"})
    state.audit("delivery_skipped", batch=4, destinations=["out", "audit"])
    state.audit("something_new", answer=42, empty=None)

    texts = [describe(e) for e in state.read_audit()]
    assert texts[0] == (
        "Run started (until idle) by Airflow task shop.orders, run manual__1, try 2 on local[2]"
    )
    assert texts[1] == "A fatal error processor_failed at orders:fix: bad"
    assert texts[2] == "Stopped gracefully: 10 records read, 8 written, 2 filtered"
    assert texts[3] == (
        "Record at position file.jsonl:42 acknowledged by alice (source in): it is never written nor "
        "replayed; reason: duplicate order"
    )
    assert texts[4] == "DLQ replayed by bob: 3 replayed, 2 delivered, 0 filtered, 1 failed again, 0 remaining"
    assert texts[5] == "Run refused: the pipeline is already running (pid 7 on w1, started by shop.orders)"
    assert texts[6] == "Batch 4 was already delivered to out, audit: not written again"
    assert texts[7] == "Something new: answer 42"
    assert details(state.read_audit()[7]) == {"answer": 42, "empty": None}


def test_a_malformed_event_still_has_words():
    assert describe({"event": "stopped", "records": "not a mapping"}) == "Stopped gracefully"
    assert describe({"event": "delivery_skipped", "batch": 1, "destinations": "x"}).startswith("Batch 1")
    assert describe({}) == "Event"


def test_durations():
    assert [duration_text(v) for v in (4, 2.5, 180, 5400, 3661, None)] == [
        "4 s",
        "2.5 s",
        "3 min",
        "1 h 30 min",
        "1 h 1 min 1 s",
        "?",
    ]
