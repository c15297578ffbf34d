"""The pgoutput CDC source under SIGKILL: a run killed mid-stream, then restarted, delivers every change
exactly once (beside tests/integration/test_postgres_pgoutput_cdc.py; here because it kills processes and
takes a minute)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from tests.conftest import read_jsonl
from tests.integration.test_postgres_pgoutput_cdc import CLI, conduit_file
from tests.integration.test_postgres_source import sql

pytestmark = pytest.mark.chaos


def test_a_run_killed_mid_stream_resumes_from_the_committed_position(pg, tmp_path) -> None:
    url = pg.create_database("pgo_kill")
    sql(url, "CREATE TABLE items (id int PRIMARY KEY, v text)")
    pipeline = tmp_path / "kill.yaml"
    out, state, log = tmp_path / "out", tmp_path / "state", tmp_path / "runs.log"
    pipeline.write_text(conduit_file(url, "items", "pgo_kill", out=str(out), extra="maxRecordsPerBatch: 40"))
    run = [*CLI, "run", str(pipeline), "--until-idle", "--state-dir", str(state)]
    first = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]  # the (empty) snapshot; the slot is made
    inserts, updates = 600, 200
    for start in range(0, inserts, 20):  # transactions of 20 changes
        sql(url, f"INSERT INTO items SELECT g, 'v' || g FROM generate_series({start}, {start + 19}) g")
    for start in range(0, updates, 20):
        sql(url, f"UPDATE items SET v = v || '!' WHERE id BETWEEN {start} AND {start + 19}")

    commits = state / "pgo" / "checkpoint" / "commits"
    done = {p.name for p in commits.iterdir()} if commits.exists() else set()
    process = subprocess.Popen(run, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if len({p.name for p in commits.iterdir() if p.name.isdigit()} - done) >= 2:
                break
            time.sleep(0.05)
        killed = process.poll() is None
        if killed:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert killed, (
        f"the run ended (exit {process.returncode}) before it was killed: {log.read_text()[-4000:]}"
    )
    partial = len(read_jsonl(out))
    assert 0 < partial < inserts + updates

    final = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    records = read_jsonl(out)
    positions = Counter(r["position"] for r in records)
    assert [p for p, n in positions.items() if n > 1] == [], "a change was delivered twice"
    assert Counter(r["operation"] for r in records) == {"create": inserts, "update": updates}
    assert sorted(r["key"]["id"] for r in records if r["operation"] == "create") == list(range(inserts))
    updated = [r["payload"]["after"] for r in records if r["operation"] == "update"]
    assert sorted(u["id"] for u in updated) == list(range(updates))
    assert all(u["v"] == f"v{u['id']}!" for u in updated)
    # And the slot was acknowledged up to the end: nothing is left to read.
    again = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and len(read_jsonl(out)) == inserts + updates
