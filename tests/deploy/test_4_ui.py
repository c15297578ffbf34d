"""Case 9: the Conduit pages of the API server (``/conduit/``) in headless chromium show the real runs.

Runs after the other cases: the pipelines their DAG runs left in the shared state dir
(``AIRFLOW__CONDUIT__STATE_DIRS``) are listed with the status each has there, a pipeline's page shows its
audit events, and the page of case 6's producer shows its DLQ.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from deployment import Deployment, DlqReview, KilledRun, OutageRun

from airflow_conduit.state import list_pipelines
from tests.browser import headless_chromium

pytestmark = pytest.mark.deploy

ARTIFACTS = Path(tempfile.gettempdir()) / "conduit-deploy-artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as chromium:
        yield chromium


def shown_events(page: Any) -> list[str]:
    """The audit events the pipeline page lists (it fetches them after it loads), newest first."""
    names = page.locator("#events tbody td.event-name")
    names.first.wait_for()
    return names.all_inner_texts()


def test_conduit_pages_show_the_real_runs(
    deploy: Deployment,
    dlq_review: DlqReview,
    outage_run: OutageRun | None,
    killed_run: KilledRun | None,
    browser,
) -> None:
    for background in (outage_run, killed_run):  # cases 1 and 8: let their pipelines settle first
        if background is not None:
            with suppress(Exception):  # their own tests report how they ended
                background.result(timeout=540)
    states = {s.pipeline_id: s for s in list_pipelines(deploy.state_dir)}
    expected = {pid: (s.read_status() or {}).get("status", "unknown") for pid, s in states.items()}
    assert "deploy-orders" in expected and "deploy-orders-replay" in expected, expected
    ARTIFACTS.mkdir(exist_ok=True)

    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    response = page.goto(f"{deploy.base_url}/conduit/")
    assert response is not None and response.status == 200
    names = page.locator("table.pipelines a").all_inner_texts()
    shown = dict(zip(names, page.locator("table.pipelines .status").all_inner_texts(), strict=True))
    assert shown == expected
    page.screenshot(path=str(ARTIFACTS / "pipelines.png"), full_page=True)

    # The producer of case 6: stopped, its audit events, and the DLQ its asset event announced.
    page.locator("table.pipelines a", has_text=re.compile("^deploy-orders$")).click()
    page.wait_for_url(re.compile(r".*/conduit/pipelines/deploy-orders\?state_dir=.*"))
    assert page.locator("h1 .status").inner_text() == "stopped"
    audit = [e["event"] for e in states["deploy-orders"].read_audit()]
    events = shown_events(page)
    assert events and events == list(reversed(audit))[: len(events)], (events, audit)
    assert {"started", "stopped"} <= set(events)
    dlq = dlq_review.event["extra"]["records"]
    # The page fetches its DLQ after it loads: wait for the rows, then read the summary it wrote.
    page.locator("#dlq tbody td.dlq-message").first.wait_for()
    assert (
        page.locator("#dlq-summary")
        .inner_text()
        .replace(",", "")
        .startswith(f"{dlq} records in 1 error code")
    )
    errors = page.locator("#dlq tbody td.dlq-message").all_inner_texts()
    assert errors and set(errors) == {"amount is a multiple of 10"}, errors
    page.screenshot(path=str(ARTIFACTS / "deploy-orders.png"), full_page=True)

    checked = ["deploy-orders"]
    if "deploy-degraded" in expected:  # case 3: degraded after its window was used up
        page.goto(f"{deploy.base_url}/conduit/pipelines/deploy-degraded")
        assert page.locator("h1 .status").inner_text() == "degraded"
        error = states["deploy-degraded"].read_status()["error"]
        assert page.locator(".error-message").first.inner_text() == error["message"], error
        events = shown_events(page)
        assert {"started", "fault", "recovering", "degraded"} <= set(events), events
        checked.append("deploy-degraded")
    page.close()
    print(
        f"\nverified: /conduit/ in headless chromium listed the {len(expected)} pipelines the DAG runs left "
        f"({', '.join(f'{p} {s}' for p, s in sorted(expected.items()))}); the pages of "
        f"{' and '.join(checked)} showed their status and audit events, deploy-orders its {dlq} DLQ "
        f"records (screenshots in {ARTIFACTS})"
    )
