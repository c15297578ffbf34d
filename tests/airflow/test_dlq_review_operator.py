"""``ConduitDLQReviewOperator`` on real DLQ records of a real pipeline run (local Spark), answered as the
Airflow API (a person) or the scheduler's timeout sweep would answer: the event its ``execute_complete``
gets on resume. The HITL form in a real deployment is tested in tests/deploy/test_7_dlq_review.py.

The tests not marked ``engine`` write the DLQ store by hand (as the engine writes it) and need no Spark;
one of them runs the review in a real ``dag.test()``, answered through the Core API's handler.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import SPARK_CONN, AirflowEnv

from airflow_conduit import dlq_tools
from airflow_conduit.assets import dlq_asset
from airflow_conduit.dlq_review import (
    REVIEWED_EVENT,
    ReviewKind,
    ReviewRecord,
    acknowledge,
    with_inspected_record,
)
from airflow_conduit.operators.dlq_review import SHOWN_XCOM_KEY, ConduitDLQReviewOperator
from airflow_conduit.plugins.event_text import describe
from airflow_conduit.state import PipelineState
from tests.conftest import read_jsonl

# Each replay starts Spark in a subprocess (minutes here): with the engine runs, in make test-e2e.
engine = pytest.mark.engine

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


@engine
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


@engine
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


@engine
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


@engine
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


@engine
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
    # The form shows the record itself (from the stopped batch), not only the position the error names.
    assert poison.record is not None and poison.record["payload"]["after"]["amount"] % 7 == 0, poison
    assert op.params["positions"] == poison.position
    assert op.body is not None and "is **degraded**" in op.body and "dlq_threshold_exceeded" in op.body
    outcome = op.execute_complete({}, answer("acknowledge", reason="bad order", positions=poison.position))
    assert (outcome["skipped"], outcome["resume"]) == (1, True), outcome
    assert [a["position_text"] for a in state.read_acked()] == [poison.position]
    # Resumed past it: the next run does not stop on that record (later multiples of 7 may stop it again).
    resumed = run_yaml(text)
    assert resumed["error"] is None or poison.position not in resumed["error"]["message"], resumed
    assert (reviewed(state)[0]["kind"], reviewed(state)[0]["resume"]) == ("poison", True)


@engine
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


@engine
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


# Without Spark: the DLQ store written by hand ----------------------------------------------------------
def dlq_line(i: int) -> dict[str, Any]:
    """A DLQ record as the engine stores it: the failed record (position ``i``) in ``payload.after``."""
    position = base64.b64encode(str(i).encode()).decode()
    return {
        "position": position,
        "operation": "create",
        "metadata": {
            "conduit.dlq.nack.error": f"order {i} refused",
            "conduit.dlq.nack.node.id": "review-orders:reject-round-amounts",
        },
        "key": position,
        "payload": {"before": None, "after": {"position": position, "payload": {"after": {"id": i}}}},
    }


def store_write(state: PipelineState, name: str, ids: list[int]) -> dict[str, Any]:
    """Write one DLQ file; returns the extra of the asset event announcing that write."""
    state.dlq_dir.mkdir(parents=True, exist_ok=True)
    (state.dlq_dir / name).write_text("".join(json.dumps(dlq_line(i)) + "\n" for i in ids))
    return {"path": str(state.dlq_dir), "files": {name: [0, len(ids)]}, "write": name.removesuffix(".jsonl")}


def hand_operator(state: PipelineState) -> ConduitDLQReviewOperator:
    return ConduitDLQReviewOperator(
        task_id="review",
        pipeline_file="unused.yaml",  # neither acknowledge nor leave reads it
        pipeline_id=state.pipeline_id,
        state_dir=str(state.state_dir),
    )


def triggered_by(*extras: dict[str, Any]) -> dict[str, Any]:
    return {
        "triggering_asset_events": {dlq_asset("review-orders"): [SimpleNamespace(extra=e) for e in extras]}
    }


def test_a_dlq_write_announced_twice_is_reviewed_once(tmp_path: Path) -> None:
    """The watch trigger, killed between storing an event and recording it, announces the write again:
    one run triggered by both events shows and acknowledges each record once."""
    state = PipelineState.of(tmp_path / "state", "review-orders")
    extra = store_write(state, "g1-000000000003-0.jsonl", [1, 2, 3])
    op = hand_operator(state)
    records = op.prepare(triggered_by(extra, dict(extra)))
    assert [r.id for r in records] == [f"g1-000000000003-0.jsonl:{n}" for n in range(3)]
    assert op.subject == "Review 3 DLQ record(s) of pipeline review-orders"
    outcome = op.execute_complete(triggered_by(extra, dict(extra)), answer("acknowledge", reason="dup"))
    assert (outcome["records"], outcome["skipped"]) == (3, 3), outcome
    assert len(state.read_acked()) == 3


def test_records_resolved_already_are_not_asked_about_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second run for a doubled event, after the first run's answer: acknowledged records and records
    replayed successfully are not shown again; with none left the task ends without asking, and says why."""
    state = PipelineState.of(tmp_path / "state", "review-orders")
    extra = store_write(state, "g1-000000000004-0.jsonl", [1, 2, 3, 4])
    shown = hand_operator(state).prepare(triggered_by(extra))
    # The first run's answers, as the DLQ browser or a replay leave them: two acknowledged, one replayed.
    acknowledge(state, shown[:2], kind=ReviewKind.DLQ, reason="seen", user="alice")
    replayed_file = state.root / "replay" / "replayed.jsonl"  # as airflow-conduit replay records it
    replayed_file.parent.mkdir(parents=True)
    replayed_file.write_text(json.dumps({"entry": shown[2].id}) + "\n")

    again = hand_operator(state)
    assert [r.id for r in again.prepare(triggered_by(extra))] == [shown[3].id]
    assert again.subject == "Review 1 DLQ record(s) of pipeline review-orders"

    acknowledge(state, shown[3:], kind=ReviewKind.DLQ, reason="seen", user="alice")
    last = hand_operator(state)
    result = last.execute(triggered_by(extra, dict(extra)))
    assert (result["records"], result["action"]) == (0, "leave")
    assert (
        "The 4 DLQ record(s) of review-orders in the triggering event(s) were already resolved"
        in capsys.readouterr().out  # Airflow's task logger writes there
    )
    assert reviewed(state) == []


ANSWERED_LATER = """
from __future__ import annotations

import pendulum
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG, task

from airflow_conduit.assets import dlq_asset
from airflow_conduit.operators.dlq_review import ConduitDLQReviewOperator

ASSET = dlq_asset("review-orders")
EXTRAS = {extras!r}


def form_open(dag_run) -> bool:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        state = session.scalar(
            select(TaskInstance.state).where(
                TaskInstance.dag_id == dag_run.dag_id,
                TaskInstance.run_id == dag_run.run_id,
                TaskInstance.task_id == "review",
            )
        )
    return state == "awaiting_input"


class Alice:
    def get_id(self) -> str:
        return "alice"

    def get_name(self) -> str:
        return "alice"


with DAG("review_answered_later", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:

    @task(outlets=[ASSET])
    def first_write(*, outlet_events) -> None:
        outlet_events[ASSET].extra = EXTRAS[0]

    @task(outlets=[ASSET])
    def second_write(*, outlet_events) -> None:
        outlet_events[ASSET].extra = EXTRAS[1]

    @task
    def respond(*, dag_run) -> None:
        # What PATCH .../taskInstances/review/-1/hitlDetails runs: record the answer, resume the task.
        from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
        from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
        from airflow.utils.session import create_session

        with create_session() as session:
            update_hitl_detail(
                dag_id=dag_run.dag_id,
                dag_run_id=dag_run.run_id,
                task_id="review",
                update_hitl_detail_payload=UpdateHITLDetailPayload(
                    chosen_options=["acknowledge"], params_input={{"reason": "as shown"}}
                ),
                user=Alice(),
                session=session,
            )

    review = ConduitDLQReviewOperator(
        task_id="review", pipeline_file="unused.yaml", pipeline_id="review-orders", state_dir={state_dir!r}
    )
    wait = PythonSensor(
        task_id="form_open", python_callable=form_open, mode="reschedule", poke_interval=1, timeout=300
    )
    first = first_write()
    first >> review
    first >> wait >> second_write() >> respond()
"""


def test_the_answer_acts_on_the_records_the_form_showed(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    """A manual run shows the asset's latest event; another DLQ write is announced while the form is
    open. The answer, given afterwards, acknowledges the records shown, not the newer event's."""
    state = PipelineState.of(tmp_path / "state", "review-orders")
    shown = store_write(state, "g1-000000000001-0.jsonl", [1, 2])
    newer = store_write(state, "g1-000000000002-0.jsonl", [3, 4, 5])
    dag_file = airflow_env.write_dag(
        "review_answered_later",
        ANSWERED_LATER.format(extras=[shown, newer], state_dir=str(state.state_dir)),
    )
    result = airflow_env.run_dag(dag_file, "review_answered_later", timeout=400)
    assert result["state"] == "success", result["log"][-3000:]
    assert {a["dlq_entry"] for a in state.read_acked()} == {
        "g1-000000000001-0.jsonl:0",
        "g1-000000000001-0.jsonl:1",
    }
    outcome = result["xcom"]["review"]["return_value"]
    assert (outcome["records"], outcome["skipped"], outcome["user"]) == (2, 2, "alice"), outcome
    assert result["xcom"]["review"][SHOWN_XCOM_KEY]["ids"] == outcome["ids"]


def test_a_threshold_record_takes_its_content_and_exact_position_from_the_stopped_batch() -> None:
    """The engine's threshold message names the position as text only; the stopped batch's record gives
    the form its content, and the acknowledgement the position's own bytes (not the text re-encoded)."""
    raw_position = b"orders.jsonl:\xff\x01"
    text = raw_position.decode(errors="replace")
    found = ReviewRecord(
        id=text, position=text, node="p:check", error="too many", record=None, position_bytes=text.encode()
    )
    stored = {"position": base64.b64encode(raw_position).decode(), "payload": {"after": {"n": 7}}}
    inspected = [
        ReviewRecord(id="other", position="other", node=None, error=None, record={}, position_bytes=b"other"),
        ReviewRecord(
            id=text,
            position=text,
            node=None,
            error=None,
            record=stored,
            position_bytes=raw_position,
            source="in",
        ),
    ]
    enriched = with_inspected_record(found, inspected)
    assert (enriched.record, enriched.position_bytes, enriched.source) == (stored, raw_position, "in")
    assert (enriched.node, enriched.error) == ("p:check", "too many")
    assert with_inspected_record(found, inspected[:1]) == found
