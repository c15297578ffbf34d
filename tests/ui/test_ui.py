"""The Conduit pages in a real browser: Airflow's API server on loopback, Debian's chromium via Playwright.

The state dir holds two pipelines written through ``state.py``: ``orders``, degraded after its DLQ
threshold was exceeded (with DLQ records), and ``clicks``, stopped gracefully.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.state import PipelineState
from tests.browser import CHROMIUM, headless_chromium

pytestmark = pytest.mark.ui

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
DEGRADED_MESSAGE = (
    "DLQ nack threshold exceeded (window 10, threshold 2) at position 128: amount is a multiple of 10"
)


def write_state(state_dir: Path) -> None:
    orders = PipelineState.of(state_dir, "orders")
    error = {
        "kind": "fatal",
        "code": "dlq_threshold_exceeded",
        "message": DEGRADED_MESSAGE,
        "node": "orders:reject",
    }
    records = {
        "read": 150,
        "acked": 147,
        "filtered": 0,
        "nacked": 3,
        "dlq": 3,
        "written": {"orders:out": 147},
    }
    orders.audit("started", mode="until_idle")
    orders.audit(
        "fault", classification="fatal", code=error["code"], message=DEGRADED_MESSAGE, node=error["node"]
    )
    orders.audit("degraded", error=error)
    orders.write_exit_payload(
        {
            "pipeline": "orders",
            "status": "degraded",
            "exit_code": 1,
            "error": error,
            "records": records,
            "batches": 3,
            "started_at": "2026-01-01T00:00:00Z",
            "ended_at": "2026-01-01T00:00:10Z",
            "duration_seconds": 10.0,
        }
    )
    orders.write_status("degraded", error=error, counters=records)
    orders.dlq_dir.mkdir(parents=True)
    lines = []
    for position in ("10", "60", "120"):
        failed = {
            "position": position,
            "operation": "create",
            "key": position,
            "payload": {"after": {"amount": int(position)}},
        }
        lines.append(
            json.dumps(
                {
                    "position": position,
                    "operation": "create",
                    "metadata": {
                        "conduit.dlq.nack.error": f"amount {position} is a multiple of 10",
                        "conduit.dlq.nack.node.id": "orders:reject",
                    },
                    "key": position,
                    "payload": {"before": None, "after": failed},
                }
            )
        )
    (orders.dlq_dir / "20260101T000000-000000000000-00000.jsonl").write_text("\n".join(lines) + "\n")

    clicks = PipelineState.of(state_dir, "clicks")
    done = {
        "read": 1000,
        "acked": 1000,
        "filtered": 0,
        "nacked": 0,
        "dlq": 0,
        "written": {"clicks:out": 1000},
    }
    clicks.audit("started", mode="continuous")
    clicks.audit("stopped", records=done)
    clicks.write_exit_payload(
        {
            "pipeline": "clicks",
            "status": "stopped",
            "exit_code": 0,
            "error": None,
            "records": done,
            "batches": 4,
            "started_at": "2026-01-01T00:00:00Z",
            "ended_at": "2026-01-01T00:00:04Z",
            "duration_seconds": 4.0,
        }
    )
    clicks.write_status("stopped", error=None, counters=done)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def airflow_server(tmp_path_factory) -> Iterator[str]:
    assert Path(CHROMIUM).exists(), "install Debian's chromium: apt-get install -y chromium"
    root = tmp_path_factory.mktemp("conduit-ui")
    state_dir = root / "state"
    write_state(state_dir)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(root / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CONDUIT__STATE_DIRS": str(state_dir),
    }
    (root / "dags").mkdir()
    subprocess.run(
        [str(VENV_BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, timeout=600
    )
    port = free_port()
    log = (root / "api-server.log").open("wb")
    server = subprocess.Popen(
        [
            str(VENV_BIN / "airflow"),
            "api-server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"api-server did not start:\n{(root / 'api-server.log').read_text()[-6000:]}"
                )
            time.sleep(1)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium() as chromium:
        yield chromium


def test_pipeline_list_shows_both_pipelines_and_the_degraded_error(airflow_server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    response = page.goto(f"{airflow_server}/conduit/")
    assert response is not None and response.status == 200
    rows = page.locator("table.pipelines tbody tr")
    assert rows.count() == 2
    assert page.locator("table.pipelines a").all_inner_texts() == ["clicks", "orders"]
    statuses = page.locator("table.pipelines .status").all_inner_texts()
    assert statuses == ["stopped", "degraded"]
    orders_row = rows.filter(has_text="orders")
    assert DEGRADED_MESSAGE in orders_row.locator(".error-message").inner_text()
    assert orders_row.locator("td").nth(7).inner_text() == "15.0"  # records/s: 150 read in 10 s

    artifacts = HERE / "artifacts"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir()
    shot = artifacts / "conduit-pipelines.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.close()


def test_pipeline_page_shows_error_events_and_dlq(airflow_server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(f"{airflow_server}/conduit/")
    page.locator("table.pipelines a", has_text="orders").click()
    page.wait_for_url(re.compile(r".*/conduit/pipelines/orders\?state_dir=.*"))
    assert page.locator("h1 .status").inner_text() == "degraded"
    assert page.locator(".error-message").inner_text() == DEGRADED_MESSAGE
    assert page.locator("table.events tbody tr td:nth-child(2)").all_inner_texts() == [
        "degraded",
        "fault",
        "started",
    ]
    assert page.locator(".dlq-count").inner_text() == "3"
    dlq_errors = page.locator("table.dlq tbody tr td:nth-child(3)").all_inner_texts()
    assert dlq_errors == [f"amount {p} is a multiple of 10" for p in ("10", "60", "120")]
    shot = HERE / "artifacts" / "conduit-orders.png"
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.close()


def test_json_endpoint_and_airflow_navigation(airflow_server, browser):
    page = browser.new_page()
    listing = page.request.get(f"{airflow_server}/conduit/api/pipelines")
    assert listing.ok
    statuses = {p["pipeline"]: p["status"] for p in listing.json()["pipelines"]}
    assert statuses == {"clicks": "stopped", "orders": "degraded"}
    orders = page.request.get(f"{airflow_server}/conduit/api/pipelines/orders").json()
    assert orders["error"]["message"] == DEGRADED_MESSAGE and orders["dlq"]["records"] == 3
    assert page.request.get(f"{airflow_server}/conduit/api/pipelines/nope").status == 404

    plugins = page.request.get(f"{airflow_server}/api/v2/plugins").json()["plugins"]
    ours = [p for p in plugins if p["name"] == "conduit"]
    assert ours and [v["url_route"] for v in ours[0]["external_views"]] == ["conduit"]

    # The navigation entry: Airflow's own UI frames the pipeline list at /plugin/conduit.
    page.goto(f"{airflow_server}/plugin/conduit")
    frame = page.frame_locator("iframe")
    frame.locator("table.pipelines").wait_for(timeout=120_000)
    assert frame.locator("table.pipelines a").all_inner_texts() == ["clicks", "orders"]
    page.close()
