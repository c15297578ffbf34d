"""``standalone:nats`` under SIGKILL and outages (beside tests/integration/test_nats_connector.py; here
because they kill processes and take minutes).

- SIGKILL at random moments inside micro-batches, under ``ackPolicy: explicit`` (the default) and
  ``all``: after each kill the messages the durable consumer counts as acked are at most the end of the
  last batch Spark committed, and its ack floor is at or below that end (nothing acked before its batch
  committed); at the end every message reached the file destination once, and the NATS destination's
  stream holds each once (its duplicate window dropped the replays).
- The server killed mid-run: the run ends with exit 75; with the server back the next run completes,
  nothing lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import read_jsonl, text
from tests.integration.test_nats_connector import SOURCE_PIPELINE
from tests.servers.nats import NatsServer
from tests.servers.nats import nats_server as nats_server  # the fixture

pytestmark = pytest.mark.chaos

CLI = [sys.executable, "-m", "airflow_conduit.cli"]
MESSAGES = 240
KILLS = 4


def _bodies(count: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"n": n}).encode() for n in range(start, start + count)]


def _numbers(bodies: list[bytes]) -> list[int]:
    return [json.loads(text(json.loads(body)["payload"]["after"]) or "")["n"] for body in bodies]


def _committed_end(checkpoint: Path) -> int:
    """The stream sequence the last batch in Spark's commit log ends at (0: none committed)."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
    if not commits:
        return 0
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    return int(json.loads(lines[2])["seq"])


def _in_flight(checkpoint: Path) -> bool:
    """A batch is planned (in the offset log) and not committed: the run is inside a batch."""
    offsets = {p.name for p in (checkpoint / "offsets").glob("*") if p.name.isdigit()}
    commits = {p.name for p in (checkpoint / "commits").glob("*") if p.name.isdigit()}
    return bool(offsets - commits)


@pytest.mark.timeout(1800)  # five Spark runs; slow on a loaded machine
@pytest.mark.parametrize("ack_policy", ["explicit", "all"])  # explicit: the connector's default
def test_sigkill_inside_batches_acks_nothing_early_and_loses_nothing(
    nats_server: NatsServer, tmp_path, ack_policy: str
):
    nats_server.add_stream("ORDERS", ["orders"])
    nats_server.add_stream("EVENTS", ["events.>"])
    nats_server.publish("orders", _bodies(MESSAGES))
    pipeline = tmp_path / "kill.yaml"
    out, state, log = tmp_path / "out", tmp_path / "state", tmp_path / "runs.log"
    # An explicit ack needs the message's own handle: what a killed run pulled stays pending until the
    # server redelivers it after ackWait (60 s by default): with 10 s, and the final run started once
    # that passed after the last kill, the final run gets and acks those. Under 'all' the first ack past
    # them covers them.
    ack_wait = 10.0 if ack_policy == "explicit" else 0.0
    wait = f", ackWait: {ack_wait:.0f}s" if ack_wait else ""
    pipeline.write_text(f"""
version: "2.2"
pipelines:
  - id: nk
    connectors:
      - {{id: in, type: source, plugin: nats, settings: {{urls: "{nats_server.url}", stream: ORDERS, subject: orders, ackPolicy: {ack_policy}, maxRecordsPerBatch: 30{wait}}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{out}"}}}}
      - {{id: bus, type: destination, plugin: nats, settings: {{urls: "{nats_server.url}", subject: events.copy}}}}
""")
    run = [*CLI, "run", str(pipeline), "--until-idle", "--state-dir", str(state)]
    checkpoint = state / "nk" / "checkpoint"
    rng = random.Random(20)
    kills = 0
    for _ in range(KILLS):
        process = subprocess.Popen(
            run, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            seen = len(read_jsonl(out)) if out.exists() else 0
            deadline = time.monotonic() + 600
            # Inside a batch that is not the first of this run: past the start-up, messages moving.
            while time.monotonic() < deadline and process.poll() is None:
                moved = (len(read_jsonl(out)) if out.exists() else 0) > seen
                if moved and checkpoint.exists() and _in_flight(checkpoint):
                    break
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 0.8))  # somewhere inside the batch: reading, writing or publishing
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                kills += 1
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        consumer = nats_server.consumer_info("ORDERS", "conduit-nk_in")
        committed = _committed_end(checkpoint)
        # One subject, sequences 1..MESSAGES: every sequence up to the delivered one was delivered, and
        # those not pending were acked (explicit acks need not be contiguous, so the floor is not enough).
        acked = consumer.delivered.stream_seq - consumer.num_ack_pending
        print(
            f"{ack_policy}: {acked} acked, floor {consumer.ack_floor.stream_seq}, committed end {committed}"
        )
        assert acked <= committed, (ack_policy, consumer.delivered, consumer.num_ack_pending, committed)
        assert consumer.ack_floor.stream_seq <= committed, (consumer.ack_floor, committed)
    assert kills >= 3, f"only {kills} runs were killed inside a batch: {log.read_text()[-3000:]}"

    time.sleep(ack_wait + 0.5)  # the killed runs' pending messages are due for redelivery
    final = subprocess.run(run, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0, final.stderr[-3000:]
    delivered = [json.loads(text(r["payload"]["after"]) or "")["n"] for r in read_jsonl(out)]
    assert delivered == list(range(MESSAGES))  # every message, once, in order (exactly once)
    copied = _numbers(nats_server.stream_bodies("EVENTS"))
    assert sorted(copied) == list(range(MESSAGES))  # each once: the duplicate window dropped replays
    consumer = nats_server.consumer_info("ORDERS", "conduit-nk_in")
    assert consumer.ack_floor.stream_seq == MESSAGES and consumer.num_ack_pending == 0


# A custom.python processor that kills the NATS server when it sees a record while the flag file exists:
# the server goes away in the middle of a run. (Spark's Python workers started before the test: the
# paths are written into the module, not passed in the environment.)
STOPPER = """
import os, signal

def stop_server(record):
    if os.path.exists(%(flag)r):
        os.unlink(%(flag)r)
        os.kill(%(pid)d, signal.SIGKILL)
    return record
"""


def _stopper(tmp_path: Path, server: NatsServer) -> Path:
    (tmp_path / "udf").mkdir(exist_ok=True)
    flag = tmp_path / "stop-now"
    assert server.process is not None
    (tmp_path / "udf" / "stopper.py").write_text(STOPPER % {"flag": str(flag), "pid": server.process.pid})
    return flag


@pytest.mark.timeout(1200)
def test_a_server_gone_mid_run_is_transient_and_the_restart_loses_nothing(
    run_yaml, tmp_path, nats_server: NatsServer
) -> None:
    nats_server.add_stream("ORDERS", ["orders"])
    nats_server.add_stream("EVENTS", ["events.>"])
    nats_server.publish("orders", _bodies(100))
    flag = _stopper(tmp_path, nats_server)
    pipeline = SOURCE_PIPELINE % {"url": nats_server.url, "ack": "all"}
    pipeline = pipeline.replace(
        '      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}\n',
        '      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}\n'
        f'      - {{id: bus, type: destination, plugin: nats, settings: {{urls: "{nats_server.url}", '
        "subject: events.copy}}\n"
        "    processors:\n"
        '      - {id: stop, plugin: custom.python, condition: "CAST(CAST(.Position AS STRING) AS INT) = 50", '
        'settings: {function: "stopper:stop_server", path: "{tmp}/udf"}}\n',
    )
    flag.touch()
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 75, payload
    assert payload["error"]["code"] in ("source_failed", "destination_failed"), payload
    assert (
        "unreachable" in payload["error"]["message"] or "lost the connection" in payload["error"]["message"]
    )
    assert not os.path.exists(flag)

    nats_server.stop()
    nats_server.start()
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 0, payload
    out = [json.loads(text(r["payload"]["after"]) or "")["n"] for r in read_jsonl(tmp_path / "out")]
    assert out == list(range(100))  # the file destination: exactly once
    copied = [
        json.loads(text(json.loads(b)["payload"]["after"]) or "")["n"]
        for b in nats_server.stream_bodies("EVENTS")
    ]
    assert sorted(set(copied)) == list(range(100)) and copied == sorted(copied)  # NATS: nothing lost
    consumer = nats_server.consumer_info("ORDERS", "conduit-ns_in")
    assert consumer.ack_floor.stream_seq == 100 and consumer.num_ack_pending == 0
