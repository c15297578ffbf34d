"""The DLQ browser (plugins/dlq_browser.py) and the replay's respect for acknowledged entries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from dlq_store import dlq_line, write_dlq

from airflow_conduit.cli import main
from airflow_conduit.dlq_tools import read_dlq
from airflow_conduit.engine.replay import _record_replayed, plan_replay
from airflow_conduit.plugins import dlq_browser
from airflow_conduit.replay_state import ReplayPaths
from airflow_conduit.state import PipelineState

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CODES = ("ValueError: bad amount", "KeyError: 'sku'", "ValueError: bad amount")


@pytest.fixture
def state(tmp_path) -> PipelineState:
    state = PipelineState.of(tmp_path / "state", "orders")
    # 2,000 records over two files, one a minute, the codes in turn.
    for part in range(2):
        lines = [
            dlq_line("orders", f"in.jsonl:{i}", CODES[i % 3], T0 + timedelta(minutes=i))
            for i in range(part * 1000, (part + 1) * 1000)
        ]
        write_dlq(state, f"part-{part}.jsonl", lines)
    return state


def test_pages_newest_first_with_codes(state):
    page = dlq_browser.browse(state, offset=0, limit=50)
    assert page.total == 2000
    assert [r.position for r in page.rows[:2]] == ["in.jsonl:1999", "in.jsonl:1998"]
    assert [c for c, _ in page.codes] == ["ValueError: bad amount", "KeyError: 'sku'"]
    expected = {code: sum(CODES[i % 3] == code for i in range(2000)) for code in set(CODES)}
    assert dict(page.codes) == expected and sum(expected.values()) == 2000
    last = dlq_browser.browse(state, offset=1990, limit=50)
    assert [r.position for r in last.rows] == [f"in.jsonl:{i}" for i in range(9, -1, -1)]
    row = page.to_dict()["entries"][0]
    assert row == {
        "id": "part-1.jsonl:999",
        "time": "2026-03-02T21:19:00.000000Z",  # T0 + 1999 minutes
        "position": "in.jsonl:1999",
        "code": "KeyError: 'sku'",
        "message": "KeyError: 'sku'",
        "node": "orders:check",
        "state": "pending",
    }
    assert row["time"] == (T0 + timedelta(minutes=1999)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_filters_by_code_and_time(state):
    since, until = T0 + timedelta(minutes=10), T0 + timedelta(minutes=20)
    page = dlq_browser.browse(state, code="KeyError: 'sku'", since=since, until=until)
    # Minutes 10 to 19 (until is exclusive) whose code is the KeyError: i % 3 == 1.
    assert [r.position for r in page.rows] == ["in.jsonl:19", "in.jsonl:16", "in.jsonl:13", "in.jsonl:10"]
    assert page.total == 4
    assert dlq_browser.browse(state, since=since, until=until).total == 10
    assert dlq_browser.browse(state, code="no such code").total == 0
    # The code choices stay those of the whole DLQ.
    assert dlq_browser.browse(state, code="no such code").codes == dlq_browser.browse(state).codes


def test_lookup_and_states(state):
    entries = read_dlq(state.dlq_dir)
    acked = dlq_browser.acknowledge(
        state, ["part-0.jsonl:5", "part-0.jsonl:6"], reason="duplicates", user="alice"
    )
    assert [a["position_text"] for a in acked] == ["in.jsonl:5", "in.jsonl:6"]
    assert [a["source"] for a in acked] == ["in", "in"]  # the source's id, as the engine's filter reads it
    assert state.read_audit()[-1] == {
        **state.read_audit()[-1],
        "event": "acked",
        "user": "alice",
        "reason": "duplicates",
        "position": "in.jsonl:6",
    }
    # Acknowledging again writes nothing.
    assert dlq_browser.acknowledge(state, ["part-0.jsonl:5"], reason="again", user="bob") == []
    _record_replayed(ReplayPaths(state), ["part-0.jsonl:7"])

    by_id = {r.id: r.state for r in dlq_browser.rows(state)}
    assert (by_id["part-0.jsonl:5"], by_id["part-0.jsonl:6"]) == ("acknowledged", "acknowledged")
    assert by_id["part-0.jsonl:7"] == "replayed"
    assert sum(s == "pending" for s in by_id.values()) == len(entries) - 3

    entry = dlq_browser.lookup(state, "part-0.jsonl:5")
    assert entry is not None
    assert entry["state"] == "acknowledged"
    assert entry["record"] == entries[5].record and entry["record"]["key"] == {"id": "in.jsonl:5"}
    assert entry["error"] == CODES[5 % 3] and entry["node"] == "orders:check" and entry["source"] == "in"
    assert dlq_browser.lookup(state, "part-0.jsonl:5000") is None
    assert dlq_browser.lookup(state, "nonsense") is None
    with pytest.raises(KeyError):
        dlq_browser.acknowledge(state, ["part-9.jsonl:0"], reason="", user="x")


def test_a_poison_record_ack_leaves_its_dlq_entry_pending(state):
    """``airflow-conduit ack`` lets a pipeline past a record; replaying its DLQ entry after the fix stays
    possible (tests/integration/test_operator_tools.py runs that workflow end to end)."""
    state.ack(b"in.jsonl:5", source=None, reason="", user="")
    state.ack(b"in.jsonl:5", source="in", reason="", user="")
    assert {r.id: r.state for r in dlq_browser.rows(state)}["part-0.jsonl:5"] == "pending"
    assert plan_replay(ReplayPaths(state)).acknowledged == 0
    state.ack(b"in.jsonl:5", source="in", reason="", user="", dlq_entry="part-0.jsonl:5")
    assert {r.id: r.state for r in dlq_browser.rows(state)}["part-0.jsonl:5"] == "acknowledged"


def test_replay_skips_acknowledged_entries(tmp_path, capsys):
    state = PipelineState.of(tmp_path / "state", "orders")
    write_dlq(
        state, "part-0.jsonl", [dlq_line("orders", f"in.jsonl:{i}", "ValueError: x", T0) for i in range(3)]
    )
    dlq_browser.acknowledge(state, ["part-0.jsonl:1"], reason="not wanted", user="alice")

    plan = plan_replay(ReplayPaths(state))
    assert [e.line for e in plan.to_queue] == [0, 2]
    assert plan.acknowledged == 1

    pipeline_file = tmp_path / "orders.yaml"
    pipeline_file.write_text(
        "version: '2.2'\n"
        "pipelines:\n"
        "  - id: orders\n"
        "    connectors:\n"
        "      - {id: in, type: source, plugin: builtin:generator, settings: {recordCount: 1}}\n"
        "      - {id: out, type: destination, plugin: builtin:log}\n"
    )
    code = main(["replay", str(pipeline_file), "--state-dir", str(state.state_dir), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["positions"] == ["in.jsonl:0", "in.jsonl:2"]
    assert (summary["to_replay"], summary["acknowledged"]) == (2, 1)


def test_the_audit_log_names_conduit_user(tmp_path, monkeypatch, capsys):
    """``airflow-conduit ack`` (and ``replay``) name ``$CONDUIT_USER``: the UI sets it for the replay it starts."""
    state = PipelineState.of(tmp_path / "state", "orders")
    write_dlq(state, "part-0.jsonl", [dlq_line("orders", "in.jsonl:0", "ValueError: x", T0)])
    monkeypatch.setenv("CONDUIT_USER", "airflow-alice")
    assert main(["ack", "orders", "in.jsonl:0", "--state-dir", str(state.state_dir)]) == 0
    assert state.read_audit()[-1]["user"] == "airflow-alice"
    monkeypatch.delenv("CONDUIT_USER")
    assert main(["ack", "orders", "in.jsonl:1", "--state-dir", str(state.state_dir)]) == 0
    assert state.read_audit()[-1]["user"] != "airflow-alice"
