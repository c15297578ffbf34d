"""Fixtures of the UI test (make ui): real pipeline runs, an Airflow API server, a logged-in chromium.

What the runs are is described in :mod:`tests.ui.runs`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import CHROMIUM, headless_chromium
from tests.ui.runs import (
    ARTIFACTS,
    DAG_ID,
    PASSWORD,
    REPO,
    TASK_ID,
    USER,
    VENV_BIN,
    World,
    airflow_env,
    free_port,
    log_tail,
    stop,
    wait_healthy,
    write_inputs,
)


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> Iterator[World]:
    """Both pipelines run, then the API server serves their state (it starts while they run)."""
    assert Path(CHROMIUM).exists(), "install Debian's chromium: apt-get install -y chromium"
    root = tmp_path_factory.mktemp("conduit-ui")
    files = write_inputs(root)
    env = airflow_env(root, files)
    orders_log = (root / "orders-run.log").open("wb")
    orders = subprocess.Popen(
        [
            *(str(VENV_BIN / "airflow-conduit"), "run", str(files["orders_file"]), "--until-idle"),
            *("--state-dir", str(files["state_dir"]), "--master", "local[2]"),
        ],
        env=env,
        stdout=orders_log,
        stderr=subprocess.STDOUT,
    )
    server: subprocess.Popen[bytes] | None = None
    server_log = (root / "api-server.log").open("wb")
    try:
        subprocess.run(
            [str(VENV_BIN / "airflow"), "db", "migrate"],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        port = free_port()
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
            stdout=server_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        result = root / "dag-run.json"
        dag_test = subprocess.run(
            [
                *(sys.executable, str(REPO / "tests" / "airflow" / "run_dag.py")),
                *(str(files["dag_file"]), DAG_ID, str(result)),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert dag_test.returncode == 0 and result.exists(), (
            f"dag.test() of {DAG_ID} failed:\n{dag_test.stdout[-4000:]}\n{dag_test.stderr[-8000:]}"
        )
        dag_run = json.loads(result.read_text())
        assert dag_run["tasks"][TASK_ID]["state"] == "success", dag_test.stderr[-8000:]
        assert orders.wait(timeout=600) == 0, log_tail(root / "orders-run.log")
        base = f"http://127.0.0.1:{port}"
        wait_healthy(server, base, root / "api-server.log")
        yield World(
            root=root,
            base=base,
            state_dir=files["state_dir"],
            orders_file=files["orders_file"],
            payments_file=files["payments_file"],
            orders_out=files["orders_out"],
            payments_out=files["payments_out"],
            reject_flag=files["reject_flag"],
            dag_run=dag_run,
            env=env,
        )
    finally:
        if orders.poll() is None:
            orders.kill()
            orders.wait()
        orders_log.close()
        if server is not None:
            stop(server)
        server_log.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    with headless_chromium() as chromium:
        yield chromium


@pytest.fixture(scope="session")
def storage_state(browser: Any, world: World) -> dict[str, Any]:
    """Cookies of a session logged in through Airflow's own login page, as the user would."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{world.base}/auth/login")
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)
    state = context.storage_state()
    context.close()
    assert any(c["name"] == "_token" for c in state["cookies"]), state
    return state


@pytest.fixture
def context(browser: Any, storage_state: dict[str, Any]) -> Iterator[Any]:
    """A logged-in browser context; ``theme`` is Airflow's (light unless a test says dark)."""
    context = browser.new_context(storage_state=storage_state, viewport={"width": 1400, "height": 1000})
    yield context
    context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    return ARTIFACTS
