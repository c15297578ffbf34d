"""``ConduitDLQReviewOperator`` on real DLQ records of a real pipeline run (local Spark), answered as the
Airflow API (a person) or the scheduler's timeout sweep would answer: the event its ``execute_complete``
gets on resume. The HITL form in a real deployment is tested in tests/deploy/test_7_dlq_review.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import SPARK_CONN

from airflow_conduit import dlq_tools
from airflow_conduit.assets import dlq_asset
from airflow_conduit.dlq_review import REVIEWED_EVENT
from airflow_conduit.operators.dlq_review import ConduitDLQReviewOperator
from airflow_conduit.plugins.event_text import describe
from airflow_conduit.state import PipelineState
from tests.conftest import read_jsonl

# Each replay starts Spark in a subprocess (minutes here): with the engine runs, in make test-e2e.
pytestmark = pytest.mark.engine

RECORDS = 9
PIPELINE = """
version: "2.2"
pipelines:
  - id: review-orders
    connectors:
      - id: source
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "{records}"
          collections: orders
          seed: "7"
          format.type: structured
          format.options.id: int
          format.options.amount: int
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {tmp}/out
    processors:
      - id: reject-round-amounts
        plugin: error
        condition: .Payload.After.amount % {modulus} = 0
        settings:
          message: amount is a multiple of {modulus}
    dead-letter-queue:
      window-size: {window}
      window-nack-threshold: 0
"""
# Modulus 3 rejects about a third of the generated amounts; the fix (a modulus above every amount) none.
FAILING, FIXED = 3, 1_000_000_007


def pipeline_text(tmp: Path, *, modulus: int, window: int = 0, records: int = RECORDS) -> str:
    return PIPELINE.format(tmp=tmp, modulus=modulus, window=window, records=records)


@pytest.fixture(autouse=True)
def spark_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_CONN)


def answer(option: str, *, user: str | None = "alice", reason: str = "", **params: str) -> dict[str, Any]:
    """The event ``execute_complete`` gets: a person's answer (through the API), or with ``user=None``
    the scheduler's timeout sweep applying the defaults."""
    return {
        "chosen_options": [option],
        "params_input": {"reason": reason, **params},
        "responded_at": datetime.now(UTC),
        "responded_by_user": {"id": user, "name": user} if user else None,
        "timedout": user is None,
    }


@pytest.fixture
def dlq_run(run_yaml, tmp_path: Path) -> dict[str, Any]:
    """A real run that put the records whose amount is a multiple of 3 into the DLQ; the event extra
    the pipeline operator would emit for it; the pipeline file, then fixed."""
    payload = run_yaml(pipeline_text(tmp_path, modulus=FAILING))
    assert payload["exit_code"] == 0, payload
    state = PipelineState.of(tmp_path / "state", "review-orders")
    extra = {"path": str(state.dlq_dir), "files": dlq_tools.added_ranges(state.dlq_dir, {})}
    failed = dlq_tools.read_dlq_event(extra)
    assert 0 < len(failed) < RECORDS
    pipeline_file = tmp_path / "pipeline.yaml"
    pipeline_file.write_text(pipeline_text(tmp_path, modulus=FIXED))  # the person fixes the file
    return {"state": state, "extra": extra, "failed": failed, "file": pipeline_file}


def operator(run: dict[str, Any], **kwargs: Any) -> ConduitDLQReviewOperator:
    return ConduitDLQReviewOperator(
        task_id="review",
        pipeline_file=str(run["file"]),
        pipeline_id="review-orders",
        state_dir=str(run["state"].state_dir),
        **kwargs,
    )


def context(run: dict[str, Any]) -> dict[str, Any]:
    event = SimpleNamespace(extra=run["extra"])
    return {"triggering_asset_events": {dlq_asset("review-orders"): [event]}}


def reviewed(state: PipelineState) -> list[dict[str, Any]]:
    return [e for e in state.read_audit() if e["event"] == REVIEWED_EVENT]


def poison_review(tmp_path: Path, text: str) -> tuple[ConduitDLQReviewOperator, PipelineState]:
    """The review of a degraded pipeline whose file is ``text``."""
    pipeline_file = tmp_path / "pipeline.yaml"
    pipeline_file.write_text(text)
    op = ConduitDLQReviewOperator(
        task_id="review_degraded",
        pipeline_file=str(pipeline_file),
        pipeline_id="review-orders",
        state_dir=str(tmp_path / "state"),
        review="poison",
    )
    return op, PipelineState.of(tmp_path / "state", "review-orders")


def test_form_shows_the_event_records_with_errors_and_nodes(dlq_run) -> None:
    op = operator(dlq_run, sample_size=3)
    records = op.prepare(context(dlq_run))
    assert [r.id for r in records] == [dlq_tools.entry_id(e) for e in dlq_run["failed"]]
    count = len(records)
    assert op.subject == f"Review {count} DLQ record(s) of pipeline review-orders"
    assert op.body is not None
    assert f"**{count}** record(s) of pipeline `review-orders`" in op.body
    assert f"| {count} | review-orders:reject-round-amounts | amount is a multiple of 3 |" in op.body
    assert f"Sample (3 of {count})" in op.body
    first = dlq_run["failed"][0]
    assert f"| {dlq_tools.position_text(first.position)} | review-orders:reject-round-amounts |" in op.body
    assert json.dumps(first.record["payload"]["after"], sort_keys=True) in op.body
    assert op.options == ["replay", "acknowledge", "leave"] and op.defaults == ["leave"]


def test_replay_delivers_the_fixed_records_exactly_once(dlq_run, tmp_path: Path) -> None:
    state = dlq_run["state"]
    failed = dlq_run["failed"]
    count = len(failed)
    assert count >= 2, "the seed gives several failed records"
    before = read_jsonl(tmp_path / "out")
    assert len(before) == RECORDS - count
    # An event that announced only the first two records: only those are replayed (--entry).
    (name, (start, _)), *_ = dlq_run["extra"]["files"].items()
    first_two = {**dlq_run["extra"], "files": {name: [start, start + 2]}}
    partial = operator(dlq_run).execute_complete(
        context({**dlq_run, "extra": first_two}), answer("replay", reason="fixed the modulus")
    )
    assert (partial["records"], partial["replayed"], partial["failed_again"]) == (2, 2, 0), partial
    assert partial["error"] is None and partial["left"] == 0
    assert len(read_jsonl(tmp_path / "out")) == RECORDS - count + 2
    # The whole event, answered afterwards: the rest is replayed, nothing is written twice.
    outcome = operator(dlq_run).execute_complete(context(dlq_run), answer("replay"))
    assert (outcome["records"], outcome["replayed"], outcome["failed_again"]) == (count, count, 0), outcome
    after = read_jsonl(tmp_path / "out")
    assert len(after) == RECORDS
    amounts = sorted(r["payload"]["after"]["amount"] for r in after)
    assert amounts == sorted(
        [r["payload"]["after"]["amount"] for r in before]
        + [e.record["payload"]["after"]["amount"] for e in failed]
    )
    events = reviewed(state)
    assert [e["action"] for e in events] == ["replay", "replay"]
    assert events[0]["user"] == "alice" and events[0]["reason"] == "fixed the modulus"
    assert describe(events[0]).startswith(
        "Review of 2 DLQ records: replay chosen by alice; 2 replayed, 0 failed again"
    )


def test_acknowledge_writes_who_and_why_and_a_replay_never_sends_them(dlq_run, tmp_path: Path) -> None:
    state = dlq_run["state"]
    op = operator(dlq_run)
    outcome = op.execute_complete(context(dlq_run), answer("acknowledge", reason="test orders"))
    count = len(dlq_run["failed"])
    assert outcome["skipped"] == count and outcome["replayed"] == 0 and not outcome["resume"]
    acked = state.read_acked()
    assert {a["dlq_entry"] for a in acked} == {dlq_tools.entry_id(e) for e in dlq_run["failed"]}
    assert {(a["user"], a["reason"]) for a in acked} == {("alice", "test orders")}
    (event,) = reviewed(state)
    assert (event["action"], event["user"], event["reason"], event["skipped"]) == (
        "acknowledge",
        "alice",
        "test orders",
        count,
    )
    assert "acknowledge chosen by alice" in describe(event) and "reason: test orders" in describe(event)
    # A later replay of the same records sends none of them.
    replay = operator(dlq_run).execute_complete(context(dlq_run), answer("replay"))
    assert replay["replayed"] == 0 and len(read_jsonl(tmp_path / "out")) == RECORDS - count


def test_timeout_takes_the_default_and_leaves_the_records(dlq_run, tmp_path: Path) -> None:
    state = dlq_run["state"]
    op = operator(dlq_run, default_action="leave")
    outcome = op.execute_complete(context(dlq_run), answer("leave", user=None))
    count = len(dlq_run["failed"])
    assert (outcome["action"], outcome["left"], outcome["timed_out"], outcome["user"]) == (
        "leave",
        count,
        True,
        "",
    )
    assert state.read_acked() == []
    assert len(read_jsonl(tmp_path / "out")) == RECORDS - count
    (event,) = reviewed(state)
    assert "leave chosen by the timeout's default" in describe(event)


def test_degraded_pipeline_review_acknowledges_the_poison_record_and_resumes(
    run_yaml, tmp_path: Path
) -> None:
    # window-size 1, threshold 0: the first nack stops the pipeline (fatal), as in Conduit by default.
    text = pipeline_text(tmp_path, modulus=7, window=1, records=12)
    payload = run_yaml(text)
    assert payload["exit_code"] == 1 and payload["error"]["code"] == "dlq_threshold_exceeded", payload
    op, state = poison_review(tmp_path, text)
    records = op.prepare({})
    assert len(records) == 1
    poison = records[0]
    assert poison.node == "review-orders:reject-round-amounts"
    assert poison.error == "amount is a multiple of 7"
    assert op.params["positions"] == poison.position
    assert op.body is not None and "is **degraded**" in op.body and "dlq_threshold_exceeded" in op.body
    outcome = op.execute_complete({}, answer("acknowledge", reason="bad order", positions=poison.position))
    assert (outcome["skipped"], outcome["resume"]) == (1, True), outcome
    assert [a["position_text"] for a in state.read_acked()] == [poison.position]
    # Resumed past it: the next run does not stop on that record (later multiples of 7 may stop it again).
    resumed = run_yaml(text)
    assert resumed["error"] is None or poison.position not in resumed["error"]["message"], resumed
    assert (reviewed(state)[0]["kind"], reviewed(state)[0]["resume"]) == ("poison", True)


def test_nothing_to_review_when_the_pipeline_is_not_degraded(dlq_run) -> None:
    op = ConduitDLQReviewOperator(
        task_id="review_degraded",
        pipeline_file=str(dlq_run["file"]),
        pipeline_id="review-orders",
        state_dir=str(dlq_run["state"].state_dir),
        review="poison",
    )
    result = op.execute({})
    assert (result["records"], result["action"], result["skipped"]) == (0, "leave", 0)
    assert reviewed(dlq_run["state"]) == []


POISON_CHECK = """
import random

from airflow_conduit.errors import FatalError

CALLS = []


def check(record):
    # A service that stamps each record with a random value, and refuses amounts that are multiples of 7.
    CALLS.append(1)
    if record["payload"]["after"]["amount"] % 7 == 0:
        raise FatalError("the ledger refuses amounts that are multiples of 7")
    record["payload"]["after"]["stamp"] = random.random()
    return record
"""


def test_degraded_by_a_fatal_error_lists_the_stopped_batch_and_resumes_past_the_acknowledged(
    run_yaml, tmp_path: Path
) -> None:
    """A FatalError names the node, not the record: the review lists every record of the batch it
    stopped on (``airflow-conduit inspect``); the person keeps the poison ones in ``positions``, and on
    acknowledge the resumed pipeline writes every other record and never the acknowledged ones."""
    (tmp_path / "poison_check.py").write_text(POISON_CHECK)
    text = pipeline_text(tmp_path, modulus=FIXED, records=12).replace(
        "    processors:\n",
        f"    processors:\n      - id: ledger\n        plugin: custom.python\n        settings:\n"
        f"          function: poison_check:check\n          path: {tmp_path}\n",
    )
    payload = run_yaml(text)
    assert payload["exit_code"] == 1 and payload["error"]["code"] == "processor_fatal", payload
    op, state = poison_review(tmp_path, text)
    records = op.prepare({})
    assert len(records) == 12  # the whole stopped batch: the engine cannot say which record it was
    assert {r.node for r in records} == {"review-orders:ledger"}
    assert all("multiples of 7" in (r.error or "") for r in records)
    poison = [r.position for r in records if r.record and r.record["payload"]["after"]["amount"] % 7 == 0]
    assert poison, "the seed gives at least one multiple of 7"
    outcome = op.execute_complete(
        {}, answer("acknowledge", reason="refused by the ledger", positions=",".join(poison))
    )
    assert (outcome["skipped"], outcome["resume"]) == (len(poison), True), outcome
    resumed = run_yaml(text)
    assert resumed["exit_code"] == 0, resumed
    written = read_jsonl(tmp_path / "out")
    assert len(written) == 12 - len(poison)
    assert all(r["payload"]["after"]["amount"] % 7 != 0 for r in written)
    assert all("stamp" in r["payload"]["after"] for r in written)
