"""Case 7: the DLQ review step under the real scheduler, API server and Spark cluster.

``deploy_review`` puts orders into the DLQs of two pipelines; each DLQ asset event schedules a review
run whose ``ConduitDLQReviewOperator`` waits in ``awaiting_input``. The form renders in chromium with
the records and their errors (a screenshot goes to docs/images/ when ``CONDUIT_SCREENSHOT_DIR`` names
it); answered "replay" through the REST API (as the UI does) after the pipeline file was fixed, the
failed orders reach the destination exactly once; answered "acknowledge", the audit log says who and why.
"""

from __future__ import annotations

import os
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from deployment import Deployment, read_jsonl

from airflow_conduit import dlq_tools
from airflow_conduit.state import PipelineState
from tests.browser import headless_chromium

pytestmark = pytest.mark.deploy

ARTIFACTS = Path(
    os.environ.get("CONDUIT_SCREENSHOT_DIR") or Path(tempfile.gettempdir()) / "conduit-deploy-artifacts"
)
RECORDS = 10
ANSWER_AFTER = 15.0
"""Seconds between the form appearing and the answer (see where it is used)."""
PIPELINES = {"replay": "deploy-review-replay", "ack": "deploy-review-ack"}


def review_run(deploy: Deployment, pipeline_id: str, producer_run: str) -> str:
    """The review run the pipeline's DLQ asset event (of ``producer_run``) created."""
    api = deploy.api
    asset = api.asset(f"conduit://{pipeline_id}/dlq")
    assert asset is not None, f"the DLQ asset of {pipeline_id} is not registered"
    deadline = time.monotonic() + 120
    while True:
        events = [e for e in api.asset_events(asset["id"]) if e["source_run_id"] == producer_run]
        if events and events[0]["created_dagruns"]:
            return events[0]["created_dagruns"][0]["run_id"]
        assert time.monotonic() < deadline, f"no review run from the DLQ event of {pipeline_id}: {events}"
        time.sleep(1)


def hitl_path(dag_id: str, run_id: str) -> str:
    return (
        f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
        "/taskInstances/review/-1/hitlDetails"
    )


def awaiting_input(deploy: Deployment, dag_id: str, run_id: str, timeout: float = 600) -> dict[str, Any]:
    """Wait until the review task asks; returns its HITL detail (what the form shows)."""
    deadline = time.monotonic() + timeout
    while True:
        state = deploy.api.task_instance(dag_id, run_id, "review")["state"]
        if state == "awaiting_input":
            return deploy.api.get(hitl_path(dag_id, run_id))
        assert state not in ("failed", "success", "upstream_failed"), (
            state,
            deploy.api.log(dag_id, run_id, "review", 1)[-3000:],
        )
        assert time.monotonic() < deadline, f"{dag_id} review still {state}"
        time.sleep(1)


def answer(deploy: Deployment, dag_id: str, run_id: str, option: str, reason: str) -> dict[str, Any]:
    return deploy.api.request(
        "PATCH", hitl_path(dag_id, run_id), {"chosen_options": [option], "params_input": {"reason": reason}}
    )


# A replay runs one record per micro-batch on the Spark cluster: on a loaded 2-core machine the whole
# case took 9 to 11 minutes, past the suite's default 600 s.
@pytest.mark.timeout(1800)
def test_dlq_review_replay_and_acknowledge_through_the_api(deploy: Deployment) -> None:
    api = deploy.api
    producer = api.trigger("deploy_review")
    watch = api.wait_for_run("deploy_review", producer, timeout=900)
    assert watch.run["state"] == "success", (
        watch.seen,
        api.log("deploy_review", producer, "replay", 1)[-3000:],
    )
    states = {name: PipelineState.of(deploy.state_dir, pid) for name, pid in PIPELINES.items()}
    failed = {name: dlq_tools.read_dlq(state.dlq_dir) for name, state in states.items()}
    assert all(0 < len(entries) < RECORDS for entries in failed.values()), failed
    runs = {name: review_run(deploy, pid, producer) for name, pid in PIPELINES.items()}
    details = {name: awaiting_input(deploy, f"deploy_review_{name}", runs[name]) for name in PIPELINES}

    # What the form holds: the count, the errors with the node, the options and the default.
    count = len(failed["replay"])
    detail = details["replay"]
    assert detail["subject"] == f"Review {count} DLQ record(s) of pipeline deploy-review-replay"
    assert f"**{count}** record(s)" in detail["body"]
    assert "deploy-review-replay:reject-multiples-of-three" in detail["body"]
    assert "amount is a multiple of 3" in detail["body"]
    assert detail["options"] == ["replay", "acknowledge", "leave"] and detail["defaults"] == ["leave"]

    # The form as a person sees it, in chromium.
    first = dlq_tools.position_text(failed["replay"][0].position)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with headless_chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        url = (
            f"{deploy.base_url}/dags/deploy_review_replay/runs/{runs['replay']}/tasks/review/required_actions"
        )
        response = page.goto(url)
        assert response is not None and response.status == 200
        page.get_by_text("amount is a multiple of 3").first.wait_for(timeout=60_000)
        text = page.inner_text("body")
        assert "deploy-review-replay:reject-multiples-of-three" in text
        assert first in text and "replay" in text and "acknowledge" in text
        page.screenshot(path=str(ARTIFACTS / "dlq-review-form.png"), full_page=True)

    # The person fixed the pipeline file, then answers "replay".
    pipeline_file = deploy.dags_dir / "pipelines" / "review.yaml"
    text = pipeline_file.read_text()
    pipeline_file.write_text(text.replace("amount % 3 = 0", "amount % 1000000007 = 0"))
    # As a person would, answer some seconds after the form appeared: answered at once, the task resumes
    # while the worker process that deferred it is still exiting, and Airflow 3.3's scheduler marks the
    # task failed ("finished with state success, but the task instance's state attribute is running").
    time.sleep(ANSWER_AFTER)
    responded = answer(deploy, "deploy_review_replay", runs["replay"], "replay", "modulus fixed")
    user = responded["responded_by"]["name"]
    watch = api.wait_for_run("deploy_review_replay", runs["replay"], timeout=900)
    log = api.log("deploy_review_replay", runs["replay"], "review", 1)
    assert watch.run["state"] == "success", (watch.seen, log[-4000:])
    outcome = api.xcom("deploy_review_replay", runs["replay"], "review")
    assert (outcome["action"], outcome["replayed"], outcome["failed_again"]) == ("replay", count, 0), outcome
    assert outcome["user"] == user
    written = read_jsonl(output_dir(deploy, PIPELINES["replay"]))
    ids = [r["payload"]["after"]["id"] for r in written]
    assert len(ids) == RECORDS and len(set(ids)) == RECORDS, "every order exactly once"
    assert "replay chosen by" in log and f"replayed {count}" in log

    # "acknowledge": who and why in the audit log, nothing written.
    acked_count = len(failed["ack"])
    answer(deploy, "deploy_review_ack", runs["ack"], "acknowledge", "test orders")
    watch = api.wait_for_run("deploy_review_ack", runs["ack"], timeout=600)
    assert watch.run["state"] == "success", watch.seen
    audit = states["ack"].read_audit()
    (reviewed,) = [e for e in audit if e["event"] == "dlq_reviewed"]
    assert (reviewed["action"], reviewed["user"], reviewed["reason"], reviewed["skipped"]) == (
        "acknowledge",
        user,
        "test orders",
        acked_count,
    )
    acked = [e for e in audit if e["event"] == "acked"]
    assert len(acked) == acked_count and {e["reason"] for e in acked} == {"test orders"}
    assert len(read_jsonl(output_dir(deploy, PIPELINES["ack"]))) == RECORDS - acked_count

    # The Conduit page's events (what /conduit/pipelines/ID lists) say what was decided, in words.
    for name, expected in (("replay", f"replay chosen by {user}"), ("ack", f"acknowledge chosen by {user}")):
        shown = api.get(f"/conduit/api/pipelines/{PIPELINES[name]}/events")["events"]
        texts = [e["text"] for e in shown if e["event"] == "dlq_reviewed"]
        assert len(texts) == 1 and expected in texts[0], shown[:3]


def output_dir(deploy: Deployment, pipeline_id: str) -> Path:
    return deploy.output_dir / pipeline_id
