"""The Redis stream source under SIGKILL: a pipeline from one stream to another (the exactly-once Redis
destination) killed at random moments inside batches, three times; after each kill nothing is acked
beyond the last batch Spark committed, and in the end every entry is delivered exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.servers.redis import RedisServer, redis_server

__all__ = ["redis_server"]

pytestmark = pytest.mark.chaos

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "airflow_conduit.cli"]
ENTRIES, BATCH, KILLS = 600, 40, 3
GROUP = "conduit-rk-in"


def committed_end(state: Path) -> tuple[int, int] | None:
    """The stream id the last batch in Spark's commit log ends at (its offset log entry)."""
    checkpoint = state / "rk" / "checkpoint"
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")] if checkpoint.exists() else []
    if not commits:
        return None
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    ms, seq = json.loads(lines[2])["id"].split("-")
    return int(ms), int(seq)


def acked_ids(server: RedisServer, key: str) -> list[tuple[int, int]]:
    """Entries the group was handed and that are no longer pending: acknowledged."""
    client = server.client()
    groups = {g["name"].decode(): g for g in client.xinfo_groups(key)}
    if GROUP not in groups:
        return []
    last = groups[GROUP]["last-delivered-id"].decode()
    handed = [entry_id.decode() for entry_id, _ in client.xrange(key, "-", last)]
    still = {p["message_id"].decode() for p in client.xpending_range(key, GROUP, "-", "+", count=100_000)}
    return [tuple(map(int, i.split("-"))) for i in handed if i not in still]  # type: ignore[misc]


# Worst case: 3 x (300 s for two commits + 60 s for the exit) + the 600 s final run, about 1680 s.
@pytest.mark.timeout(2100)
def test_kills_inside_batches_ack_nothing_uncommitted_and_lose_nothing(redis_server, tmp_path) -> None:
    server = redis_server
    client = server.client()
    for start in range(0, ENTRIES, 200):
        pipe = client.pipeline(transaction=False)
        for i in range(start, start + 200):
            pipe.xadd("in", {"n": str(i)})
        pipe.execute()
    pipeline = tmp_path / "kill.yaml"
    pipeline.write_text(f"""
version: "2.2"
pipelines:
  - id: rk
    connectors:
      - {{id: in, type: source, plugin: redis, settings: {server.settings("in", maxRecordsPerBatch=str(BATCH))}}}
      - {{id: out, type: destination, plugin: redis, settings: {server.settings("out")}}}
""")
    state, log = tmp_path / "state", tmp_path / "runs.log"
    run = [*CLI, "run", str(pipeline), "--until-idle", "--state-dir", str(state)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    rng = random.Random(20)
    for kill in range(KILLS):
        commits = state / "rk" / "checkpoint" / "commits"
        before = len(list(commits.glob("[0-9]*"))) if commits.exists() else 0
        process = subprocess.Popen(
            run, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and process.poll() is None:
                if commits.exists() and len(list(commits.glob("[0-9]*"))) >= before + 2:
                    break
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.6))  # somewhere inside a later batch
            killed = process.poll() is None
            if killed:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        assert killed, (
            f"run {kill} ended (exit {process.returncode}) before the kill: {log.read_text()[-3000:]}"
        )
        end = committed_end(state)
        assert end is not None
        acked = acked_ids(server, "in")
        assert all(i <= end for i in acked), f"kill {kill}: acked past the committed batch end {end}"
        assert 0 < client.xlen("out") < ENTRIES

    final = subprocess.run(run, capture_output=True, text=True, timeout=600, env=env)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    numbers = Counter(int(fields[b"n"]) for _, fields in client.xrange("out"))
    assert sorted(numbers) == list(range(ENTRIES))  # every entry delivered
    assert set(numbers.values()) == {1}  # and exactly once
    assert int(client.xpending("in", GROUP)["pending"]) == 0
