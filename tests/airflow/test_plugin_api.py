"""The Conduit plugin's JSON API and its HTML boot data (plugins/app.py), with Airflow's user overridden."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_conduit.batch_log import BatchEntry, SourceLag, append_batch
from airflow_conduit.recovery.history import PipelineRecovery
from airflow_conduit.recovery.policy import RecoveryPolicy
from airflow_conduit.state import PipelineState, format_time

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "unit"))
from dlq_store import dlq_line, write_dlq  # noqa: E402

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ERROR = {"kind": "transient", "code": "source_failed", "message": "reset", "node": "orders:in"}
PIPELINE_FILE = (
    "version: '2.2'\n"
    "pipelines:\n"
    "  - id: orders\n"
    "    connectors:\n"
    "      - {id: in, type: source, plugin: builtin:generator, settings: {recordCount: 1}}\n"
    "      - {id: out, type: destination, plugin: builtin:log}\n"
)


@pytest.fixture
def state_dir(tmp_path) -> Path:
    return tmp_path / "state"


def signed_in(name: str, role: str) -> Iterator[object]:
    """A client of the plugin's app signed in as ``name`` with a simple auth manager ``role``: the real
    auth manager decides what the user may do, only the sign-in is skipped."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from airflow_conduit.plugins.app import app, require_user

    create_auth_manager()
    app.dependency_overrides[require_user] = lambda: SimpleAuthManagerUser(username=name, role=role)
    try:
        yield TestClient(app)
    finally:
        app.dependency_overrides.pop(require_user, None)


@pytest.fixture
def client(state_dir, monkeypatch) -> Iterator[object]:
    monkeypatch.setenv("AIRFLOW__CONDUIT__STATE_DIRS", str(state_dir))
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    yield from signed_in("alice", "user")


@pytest.fixture
def viewer(state_dir, monkeypatch) -> Iterator[object]:
    monkeypatch.setenv("AIRFLOW__CONDUIT__STATE_DIRS", str(state_dir))
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    yield from signed_in("victor", "viewer")


@pytest.fixture
def state(state_dir) -> PipelineState:
    state = PipelineState.of(state_dir, "orders")
    state.write_status("running", counters={})
    return state


def batch(n: int, run: datetime, ended: datetime) -> BatchEntry:
    return BatchEntry(
        batch=n,
        run_started_at=format_time(run),
        started_at=format_time(ended - timedelta(seconds=1)),
        ended_at=format_time(ended),
        seconds=1.0,
        read=10 * n,
        written=10 * n,
        written_by={"orders:out": 10 * n},
        filtered=0,
        dlq=0,
        lag={"orders:in": SourceLag(float(n), "bytes")},
    )


def test_batches_by_range(client, state):
    now = datetime.now(UTC)
    old_run, new_run = now - timedelta(hours=3), now - timedelta(minutes=90)
    for n, ended in enumerate([now - timedelta(hours=2, minutes=50), now - timedelta(hours=2)]):
        append_batch(state, batch(n, old_run, ended))
    for n, ended in enumerate(
        [now - timedelta(minutes=80), now - timedelta(minutes=30), now - timedelta(minutes=5)]
    ):
        append_batch(state, batch(n, new_run, ended))

    got = {r: client.get(f"/api/pipelines/orders/batches?range={r}").json() for r in ("hour", "day", "run")}
    assert [len(got[r]["batches"]) for r in ("hour", "day", "run")] == [2, 5, 3]
    assert {b["run_started_at"] for b in got["run"]["batches"]} == {format_time(new_run)}
    assert got["hour"]["range"] == "hour" and got["hour"]["now"] >= format_time(now)
    assert got["run"]["batches"][-1] == batch(2, new_run, now - timedelta(minutes=5)).to_dict()
    assert client.get("/api/pipelines/orders/batches?range=week").status_code == 422


def test_timeline_and_events(client, state):
    recovery = PipelineRecovery(state, RecoveryPolicy(min_delay=4, max_retries=3))
    state.audit("started", mode="continuous", file="/p.yaml", master="local[2]")
    state.audit("fault", classification="transient", code="source_failed", message="reset", node="orders:in")
    recovery.on_failure({"error": ERROR, "records": {}})

    runs = client.get("/api/pipelines/orders/timeline").json()["runs"]
    assert len(runs) == 1
    assert runs[0]["end"] == "recovering" and runs[0]["backoff"]["attempt"] == 1
    assert runs[0]["faults"][0]["code"] == "source_failed"

    events = client.get("/api/pipelines/orders/events?limit=2").json()["events"]
    assert [e["event"] for e in events] == ["recovering", "fault"]  # newest first
    assert (
        events[0]["text"]
        == "Restart attempt 1 scheduled in 4 s after a transient error source_failed at orders:in"
    )
    assert events[1]["details"]["code"] == "source_failed" and "time" not in events[1]["details"]
    assert len(client.get("/api/pipelines/orders/events").json()["events"]) == 3


def test_dlq_pages_filters_and_entries(client, state):
    write_dlq(
        state,
        "part-0.jsonl",
        [
            dlq_line("orders", f"in.jsonl:{i}", ("A", "B")[i % 2], T0 + timedelta(minutes=i))
            for i in range(120)
        ],
    )
    page = client.get("/api/pipelines/orders/dlq?offset=50&limit=50").json()
    assert (page["total"], page["offset"], page["limit"]) == (120, 50, 50)
    assert [e["position"] for e in page["entries"][:2]] == ["in.jsonl:69", "in.jsonl:68"]
    assert page["codes"] == [{"code": "A", "count": 60}, {"code": "B", "count": 60}]

    since = quote(format_time(T0 + timedelta(minutes=100)))
    filtered = client.get(f"/api/pipelines/orders/dlq?code=B&since={since}").json()
    assert [e["position"] for e in filtered["entries"]] == [f"in.jsonl:{i}" for i in range(119, 99, -2)]
    # A datetime-local value (no zone) is UTC.
    local = client.get("/api/pipelines/orders/dlq?until=2026-03-01T12:02").json()
    assert [e["position"] for e in local["entries"]] == ["in.jsonl:1", "in.jsonl:0"]
    assert client.get("/api/pipelines/orders/dlq?since=yesterday").status_code == 400

    entry = client.get("/api/pipelines/orders/dlq/part-0.jsonl:3").json()
    assert entry["record"]["key"] == {"id": "in.jsonl:3"} and entry["state"] == "pending"
    assert client.get("/api/pipelines/orders/dlq/part-0.jsonl:999").status_code == 404


def test_acknowledge_writes_the_audit_log_with_the_airflow_user(client, state):
    write_dlq(state, "part-0.jsonl", [dlq_line("orders", f"in.jsonl:{i}", "A", T0) for i in range(3)])
    response = client.post(
        "/api/pipelines/orders/dlq/acknowledge",
        json={"ids": ["part-0.jsonl:0", "part-0.jsonl:2"], "reason": "dup"},
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"acknowledged": 2}
    acked = [e for e in state.read_audit() if e["event"] == "acked"]
    assert [(e["user"], e["reason"], e["position"]) for e in acked] == [
        ("alice", "dup", "in.jsonl:0"),
        ("alice", "dup", "in.jsonl:2"),
    ]
    states = {e["id"]: e["state"] for e in client.get("/api/pipelines/orders/dlq").json()["entries"]}
    assert states == {
        "part-0.jsonl:2": "acknowledged",
        "part-0.jsonl:1": "pending",
        "part-0.jsonl:0": "acknowledged",
    }
    missing = client.post(
        "/api/pipelines/orders/dlq/acknowledge", json={"ids": ["part-0.jsonl:9"], "reason": ""}
    )
    assert missing.status_code == 404
    assert (
        client.post("/api/pipelines/orders/dlq/acknowledge", json={"ids": [], "reason": ""}).status_code
        == 422
    )


def test_a_viewer_may_look_but_not_acknowledge_or_replay(viewer, state):
    write_dlq(state, "part-0.jsonl", [dlq_line("orders", "7", "A", T0)])
    state.audit("started", mode="until_idle", file=None, master=None, airflow={"dag_id": "shop"})
    assert viewer.get("/api/pipelines/orders/dlq").json()["total"] == 1
    acked = viewer.post("/api/pipelines/orders/dlq/acknowledge", json={"ids": ["part-0.jsonl:0"]})
    replayed = viewer.post("/api/pipelines/orders/dlq/replay", json={})
    assert (acked.status_code, replayed.status_code) == (403, 403)
    assert "victor may not edit DAG 'shop'" in acked.json()["detail"]
    assert state.read_acked() == []
    assert [e["event"] for e in state.read_audit()] == ["started"]


def test_replay_is_refused_when_the_file_is_unknown_or_one_runs(client, state, tmp_path):
    state.audit("started", mode="until_idle")  # a run that did not record its file
    refused = client.post("/api/pipelines/orders/dlq/replay", json={})
    assert refused.status_code == 409
    assert "did not record their pipeline file" in refused.json()["detail"]
    assert "airflow-conduit replay FILE --pipeline orders" in refused.json()["detail"]

    state.audit("started", mode="until_idle", file=str(tmp_path / "gone.yaml"), master="local[1]")
    gone = client.post("/api/pipelines/orders/dlq/replay", json={})
    assert gone.status_code == 409 and "gone.yaml" in gone.json()["detail"]

    pipeline_file = tmp_path / "orders.yaml"
    pipeline_file.write_text(PIPELINE_FILE)
    state.audit("started", mode="until_idle", file=str(pipeline_file), master="local[1]")
    # A replay started by another API server process: a live process whose arguments say replay.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "replay"])
    try:
        (state.root / "replay.pid").write_text(f'{{"pid": {other.pid}, "user": "bob", "started_at": "t"}}\n')
        busy = client.post("/api/pipelines/orders/dlq/replay", json={})
        assert busy.status_code == 409 and "already running" in busy.json()["detail"]
        assert "by bob" in busy.json()["detail"]
        assert client.get("/api/pipelines/orders/dlq/replay").json()["running"] is True
    finally:
        other.kill()
        other.wait()
    assert client.get("/api/pipelines/orders/dlq/replay").json()["running"] is False
    assert not (state.root / "replay.pid").exists()


def test_replay_runs_the_cli_as_the_airflow_user(client, state, tmp_path):
    """An empty DLQ: the real ``airflow-conduit replay`` starts, needs no Spark, and audits ``replayed``."""
    pipeline_file = tmp_path / "orders.yaml"
    pipeline_file.write_text(PIPELINE_FILE)
    run_dir = tmp_path / "ran-here"  # not the file's directory: relative paths in the file mean this one
    run_dir.mkdir()
    state.audit("started", mode="until_idle", file=str(pipeline_file), cwd=str(run_dir), master="local[1]")

    response = client.post("/api/pipelines/orders/dlq/replay", json={})
    assert response.status_code == 200, response.text
    started = response.json()
    assert started["started"] is True and started["log"] == str(state.root / "replay.log")
    requested = state.read_audit()[-1]
    assert (requested["event"], requested["user"], requested["pid"], requested["cwd"]) == (
        "replay_requested",
        "alice",
        started["pid"],
        str(run_dir),
    )

    deadline = time.monotonic() + 120
    while client.get("/api/pipelines/orders/dlq/replay").json()["running"]:
        assert time.monotonic() < deadline, Path(started["log"]).read_text()
        time.sleep(0.5)
    status = client.get("/api/pipelines/orders/dlq/replay").json()
    assert status["last"] is not None, Path(started["log"]).read_text()
    assert (status["last"]["event"], status["last"]["user"]) == ("replayed", "alice")
    log = Path(started["log"]).read_text()
    assert f"replay {pipeline_file} --pipeline orders" in log and "--master local[1]" in log
    assert f" in {run_dir}: " in log.splitlines()[0]


def test_replay_of_a_run_without_a_cwd_runs_beside_the_file(client, state, tmp_path):
    """Runs before the engine recorded ``cwd`` (or whose directory is gone): the file's directory."""
    pipeline_file = tmp_path / "orders.yaml"
    pipeline_file.write_text(PIPELINE_FILE)
    state.audit("started", mode="until_idle", file=str(pipeline_file), cwd="/gone/away", master="local[1]")
    assert client.post("/api/pipelines/orders/dlq/replay", json={}).status_code == 200
    assert state.read_audit()[-1]["cwd"] == str(tmp_path)
    deadline = time.monotonic() + 120
    while client.get("/api/pipelines/orders/dlq/replay").json()["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.5)


def test_airflow_links_redirect_to_the_pipeline_that_ran_there(client, state_dir):
    first, second = PipelineState.of(state_dir, "orders"), PipelineState.of(state_dir, "refunds")
    for s, run_id in ((first, "r1"), (second, "r1"), (first, "r2")):
        s.write_status("stopped", counters={})
        context = {
            "dag_id": "shop",
            "run_id": run_id,
            "task_id": s.pipeline_id,
            "try_number": 1,
            "map_index": None,
        }
        s.audit("started", mode="until_idle", airflow=context)

    task = client.get("/airflow?dag_id=shop&run_id=r1&task_id=refunds&map_index=-1", follow_redirects=False)
    assert task.status_code == 307
    assert task.headers["location"] == f"/pipelines/refunds?state_dir={quote(str(state_dir))}"
    # A DAG run: the pipeline that started there last.
    run = client.get("/airflow?dag_id=shop&run_id=r1&task_id=&map_index=", follow_redirects=False)
    assert run.headers["location"].startswith("/pipelines/refunds?")
    latest = client.get("/airflow?dag_id=shop&run_id=r2", follow_redirects=False)
    assert latest.headers["location"].startswith("/pipelines/orders?")

    nothing = client.get("/airflow?dag_id=shop&run_id=r9&task_id=orders", follow_redirects=False)
    assert nothing.status_code == 404
    assert "No Conduit pipeline ran in" in nothing.text and "<code>r9</code>" in nothing.text


def test_pages_boot_with_the_api_urls(client, state):
    from airflow_conduit.plugins.app import app, templates

    seen: dict[str, dict] = {}
    original = templates.get_template

    def spy(name, *args, **kwargs):
        template = original(name, *args, **kwargs)
        render = template.render

        def remember(*a, **context):
            seen[name] = context
            return render(*a, **context)

        template.render = remember
        return template

    templates.get_template = spy
    try:
        assert client.get("/pipelines/orders").status_code == 200
        assert client.get("/").status_code == 200
    finally:
        templates.get_template = original
    page = seen["pipeline.html"]
    assert (page["pipeline_id"], page["state_dir"]) == ("orders", str(state.state_dir))
    assert page["item"].pipeline_id == "orders"
    assert page["static_url"] == "/static/" and page["index_href"] == "/"
    for key, path in page["api"].items():
        if key in ("dlq_acknowledge", "dlq_entry", "pipelines"):
            continue
        assert client.get(path, params={"state_dir": page["state_dir"]}).status_code == 200, (key, path)
    assert page["api"]["dlq_entry"] == "/api/pipelines/orders/dlq/{id}"
    assert seen["index.html"]["api"] == {"pipelines": "/api/pipelines"}
    assert [item.pipeline_id for item, _ in seen["index.html"]["pipelines"]] == ["orders"]
    assert any(getattr(r, "name", None) == "static" for r in app.routes)
