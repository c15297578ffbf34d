"""The deployment suite (``make deploy``): the topology of ``docker-compose.yaml`` started once per session.

tests/deploy is outside pytest's testpaths and its tests are marked ``deploy``: ``make test`` never
starts it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))  # spark_standalone
sys.path.insert(0, str(HERE.parent))  # pgcluster

from deployment import (  # noqa: E402
    KILLED_TEST,
    OUTAGE_TEST,
    Deployment,
    DlqReview,
    KilledRun,
    OutageRun,
    copy_dags,
    deployment,
    run_dlq_review,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "deploy: the docker-compose topology on loopback: PostgreSQL, the four Airflow services, a Spark "
        "standalone cluster (make deploy; not in make test)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.failed:
        _FAILURES.append(item.nodeid)
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()
_FAILURES: list[str] = []


@pytest.fixture(scope="session")
def deploy() -> Iterator[Deployment]:
    """The running deployment; its DAGs are the templates of ``tests/deploy/dags``."""
    root = Path(tempfile.mkdtemp(prefix="conduit-deploy-"))
    dag_ids = copy_dags(root / "dags")
    with deployment(root, dag_ids) as running:
        yield running
    if _FAILURES:
        print(f"\ndeployment root kept for inspection: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


def _selected(request: pytest.FixtureRequest, test: str) -> bool:
    return any(item.name == test for item in request.session.items)


@pytest.fixture(scope="session", autouse=True)
def outage_run(request: pytest.FixtureRequest, deploy: Deployment) -> OutageRun | None:
    """Case 1's DAG run, started with the session when case 1 is selected (its test comes last)."""
    return OutageRun(deploy).start() if _selected(request, OUTAGE_TEST) else None


@pytest.fixture(scope="session", autouse=True)
def killed_run(request: pytest.FixtureRequest, deploy: Deployment) -> KilledRun | None:
    """Case 8's DAG run, started with the session when case 8 is selected."""
    return KilledRun(deploy).start() if _selected(request, KILLED_TEST) else None


@pytest.fixture(scope="session")
def dlq_review(deploy: Deployment) -> DlqReview:
    """Case 6's runs, once: the DLQ test checks them, the UI test shows their DLQ."""
    return run_dlq_review(deploy)


@pytest.fixture(autouse=True)
def _service_logs_on_failure(request: pytest.FixtureRequest, deploy: Deployment) -> Iterator[None]:
    """On a failure, the tail of every service log."""
    yield
    if request.node.stash.get(_FAILED, False):
        print(f"\n===== service logs after {request.node.name} failed\n{deploy.tails(60)}")
