"""The RabbitMQ source under SIGKILL: runs killed at random moments inside batches, then a last run.

After each kill the server has put the killed consumer's unacked messages back (``messages_unacknowledged``
returns to 0), and the messages acked so far (those gone from the queue) are at most the records of the
batches in Spark's commit log (their ``batches.jsonl`` counts): nothing was acked before its batch
committed. At the end every message was delivered, at least once, and the queue is empty. Here (not in
tests/integration) because it kills processes and takes minutes.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from airflow_conduit.batch_log import read_batches
from airflow_conduit.state import PipelineState
from tests.conftest import read_jsonl
from tests.integration.test_rabbitmq_connector import publish
from tests.servers.rabbitmq import RabbitNode, rabbit_node  # noqa: F401 - the `rabbit` fixture

# Four CLI runs, each starting Spark: minutes on a busy machine.
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1800)]

CLI = [sys.executable, "-m", "airflow_conduit.cli"]
MESSAGES = 400
KILLS = 3

PIPELINE = """
version: "2.2"
pipelines:
  - id: rabbit-kill
    connectors:
      - id: mq
        type: source
        plugin: rabbitmq
        settings:
          url: "{url}"
          queue.name: {queue}
          maxRecordsPerBatch: 40
          idleWait: 300ms
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""


def bodies(out: Path) -> Counter[str]:
    return Counter(base64.b64decode(r["payload"]["after"]).decode() for r in read_jsonl(out))


def commits(state: Path) -> set[str]:
    directory = state / "rabbit-kill" / "checkpoint" / "commits"
    return {p.name for p in directory.iterdir() if p.name.isdigit()} if directory.exists() else set()


def committed_records(state: Path) -> int:
    """Records read by the batches in Spark's commit log, from the batch log.

    ``batches.jsonl`` is appended inside ``foreachBatch``, before Spark writes the commit, so a batch id
    may have an entry from a killed attempt and one from its replay: the last one is the attempt that
    committed (a replayed RabbitMQ batch reads nothing: its messages went back to the queue)."""
    read = {entry.batch: entry.read for entry in read_batches(PipelineState.of(state, "rabbit-kill"))}
    return sum(read[int(batch)] for batch in commits(state) if int(batch) in read)


def wait_requeued(node: RabbitNode, queue: str) -> tuple[int, int]:
    """The queue's (ready, unacked) once the killed consumer's connection is gone (unacked back to 0)."""
    deadline = time.monotonic() + 120
    while True:
        counts = node.queue_counts(queue)
        if counts.unacked == 0 or time.monotonic() > deadline:
            return counts.ready, counts.unacked
        time.sleep(0.2)


def test_kills_inside_batches_lose_nothing_and_ack_only_after_commit(rabbit, tmp_path) -> None:
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    queue = "chaos-kill"
    sent = [f"k-{i}" for i in range(MESSAGES)]
    publish(rabbit, queue, [s.encode() for s in sent])
    out, state, log = tmp_path / "out", tmp_path / "state", tmp_path / "runs.log"
    pipeline = tmp_path / "kill.yaml"
    pipeline.write_text(PIPELINE.format(url=rabbit.url(), queue=queue, out=out))
    run = [*CLI, "run", str(pipeline), "--until-idle", "--state-dir", str(state)]

    for kill in range(KILLS):
        done = commits(state)
        wanted = 1 + chance.randrange(2)  # kill during the 2nd or 3rd batch of this run
        process = subprocess.Popen(
            run, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and process.poll() is None:
                if len(commits(state) - done) >= wanted:
                    break
                time.sleep(0.02)
            time.sleep(chance.uniform(0.0, 0.4))  # a random moment inside the next batch
            killed = process.poll() is None
            if killed:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        assert killed, (
            f"seed {seed}: run {kill} ended (exit {process.returncode}) before the kill: {log.read_text()[-3000:]}"
        )
        ready, unacked = wait_requeued(rabbit, queue)
        assert unacked == 0, f"seed {seed}: the killed consumer's messages were not requeued"
        acked = MESSAGES - ready - unacked  # neither ready nor held by a consumer: gone for good
        # A message committed twice (its ack lost in a kill) counts twice here: a bound, not an equality.
        in_commits = committed_records(state)
        assert acked <= in_commits, (
            f"seed {seed}: after kill {kill}, {acked} messages were acked but the committed batches "
            f"hold {in_commits} records: a message was acked before its batch committed"
        )
        print(f"kill {kill}: {acked} acked, {in_commits} records in committed batches")
        # What the destination holds of this run's batches was committed or is about to be replayed.
        committed = len(commits(state) - done)
        assert committed >= wanted, f"seed {seed}: kill {kill} came before batch {wanted} committed"

    final = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    delivered = bodies(out)
    assert set(delivered) == set(sent), f"seed {seed}: lost {sorted(set(sent) - set(delivered))[:10]}"
    counts = rabbit.queue_counts(queue)
    assert (counts.ready, counts.unacked) == (0, 0)
    duplicates = sum(n - 1 for n in delivered.values())
    print(f"seed {seed}: {MESSAGES} messages, {KILLS} kills, {duplicates} delivered twice (at least once)")
