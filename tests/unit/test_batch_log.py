"""The per-batch history (``batches.jsonl``): round trip, torn lines, the ``since`` filter, the bound."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from airflow_conduit import batch_log
from airflow_conduit.batch_log import BatchEntry, SourceLag, append_batch, read_batches
from airflow_conduit.state import PipelineState, format_time

RUN = "2025-01-02T03:00:00.000000Z"


def entry(batch: int, ended: datetime | None = None, **changes) -> BatchEntry:
    ended = ended or datetime(2025, 1, 2, 3, 0, batch % 60, tzinfo=UTC)
    fields = {
        "batch": batch,
        "run_started_at": RUN,
        "started_at": format_time(ended - timedelta(seconds=0.5)),
        "ended_at": format_time(ended),
        "seconds": 0.5,
        "read": 10 + batch,
        "written": 8 + batch,
        "written_by": {"p:out": 8 + batch},
        "filtered": 1,
        "dlq": 1,
        "lag": {"p:in": SourceLag(float(100 - batch), "bytes")},
    }
    fields.update(changes)
    return BatchEntry(**fields)


@pytest.fixture
def state(tmp_path):
    batch_log._known.clear()  # the line counts this process carries, per path
    return PipelineState(tmp_path, "p")


def test_round_trip(state):
    entries = [entry(0), entry(1, lag={}), entry(2, written_by={"p:a": 3, "p:b": 7}, written=10)]
    for e in entries:
        append_batch(state, e)
    assert read_batches(state) == entries
    assert [BatchEntry.from_dict(e.to_dict()) for e in entries] == entries

    first = json.loads(state.batches_file.read_text().splitlines()[0])
    assert first == {
        "batch": 0,
        "run_started_at": RUN,
        "started_at": "2025-01-02T02:59:59.500000Z",
        "ended_at": "2025-01-02T03:00:00.000000Z",
        "seconds": 0.5,
        "read": 10,
        "written": 8,
        "written_by": {"p:out": 8},
        "filtered": 1,
        "dlq": 1,
        "lag": {"p:in": {"value": 100.0, "unit": "bytes"}},
    }


def test_no_file_no_batches(state):
    assert read_batches(state) == []


def test_torn_last_line_is_skipped_and_the_next_append_starts_a_line(state):
    append_batch(state, entry(0))
    append_batch(state, entry(1))
    whole = state.batches_file.read_bytes()
    torn = json.dumps(entry(2).to_dict())[:40]
    state.batches_file.write_bytes(whole + torn.encode())  # a writer that crashed mid-line
    assert [e.batch for e in read_batches(state)] == [0, 1]

    append_batch(state, entry(3))
    assert [e.batch for e in read_batches(state)] == [0, 1, 3]
    assert state.batches_file.read_text().splitlines()[2] == torn


def test_since_keeps_batches_that_ended_at_or_after_it(state):
    now = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)
    for batch, ago in enumerate((timedelta(days=2), timedelta(hours=3), timedelta(minutes=30), timedelta(0))):
        append_batch(state, entry(batch, ended=now - ago))
    assert [e.batch for e in read_batches(state, since=now - timedelta(hours=1))] == [2, 3]
    assert [e.batch for e in read_batches(state, since=now - timedelta(days=1))] == [1, 2, 3]
    assert [e.batch for e in read_batches(state, since=now - timedelta(minutes=30))] == [2, 3]
    assert read_batches(state, since=now + timedelta(seconds=1)) == []
    assert len(read_batches(state)) == 4


def test_bounded_to_the_last_batches(state, monkeypatch):
    monkeypatch.setattr(batch_log, "MAX_BATCHES", 5)
    for batch in range(10):
        append_batch(state, entry(batch))
    assert len(state.batches_file.read_text().splitlines()) == 10  # not yet past twice the bound
    append_batch(state, entry(10))
    assert [e.batch for e in read_batches(state)] == [6, 7, 8, 9, 10]
    for batch in range(11, 22):
        append_batch(state, entry(batch))
    lines = state.batches_file.read_text().splitlines()
    assert len(lines) <= 10
    assert [e.batch for e in read_batches(state)][-1] == 21
    assert not [p for p in state.root.iterdir() if p.name.startswith(".batches")]  # no temp file left


def test_bound_counts_a_file_this_process_did_not_write(state):
    """A restarted engine finds a full file: the real bound applies at its first append."""
    line = json.dumps(entry(0).to_dict()) + "\n"
    state.root.mkdir(parents=True)
    state.batches_file.write_text(line * (2 * batch_log.MAX_BATCHES))
    append_batch(state, entry(1))
    kept = read_batches(state)
    assert len(kept) == batch_log.MAX_BATCHES
    assert kept[-1].batch == 1
