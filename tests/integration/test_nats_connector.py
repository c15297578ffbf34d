"""``standalone:nats`` end to end on a real nats-server with JetStream (tests/servers/nats.py): the source
acks only what committed, the destination's replay is dropped by the stream's duplicate window, NATS as
the DLQ. The server going away mid-run and SIGKILLs: tests/chaos/test_nats_kill.py."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from airflow_conduit.batch_log import read_batches
from airflow_conduit.state import PipelineState
from tests.conftest import read_jsonl, text
from tests.servers.nats import SERVER, NatsServer
from tests.servers.nats import nats_server as nats_server  # the fixture

pytestmark = pytest.mark.brokers  # make brokers

SOURCE_PIPELINE = """
version: "2.2"
pipelines:
  - id: ns
    connectors:
      - id: in
        type: source
        plugin: nats
        settings: {urls: "%(url)s", stream: ORDERS, subject: orders, maxRecordsPerBatch: 20, ackPolicy: %(ack)s}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
"""

# A custom.python destination that fails once per flag file, after the NATS destination published.
FLAKY_SINK = """
import os
from airflow_conduit.errors import TransientError

def sink(records, delivery_hash):
    flag = os.environ["FLAKY_SINK_FLAG"]
    if os.path.exists(flag):
        os.unlink(flag)
        raise TransientError("the sink is down")
"""

DESTINATION_PIPELINE = """
version: "2.2"
pipelines:
  - id: nd
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 30, maxRecordsPerBatch: 10}}
      - {id: bus, type: destination, plugin: standalone:nats, settings: {urls: "%(url)s", subject: events.out}}
      - {id: sink, type: destination, plugin: custom.python, settings: {function: "nats_flaky_sink:sink", path: "{tmp}/udf"}}
"""


def _bodies(count: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"n": n}).encode() for n in range(start, start + count)]


def test_the_source_delivers_in_stream_order_and_acks_only_committed_batches(
    run_yaml, tmp_path, nats_server: NatsServer
):
    nats_server.add_stream("ORDERS", ["orders", "other"])
    nats_server.publish("orders", _bodies(30))
    nats_server.publish("other", [b"not ours"] * 5)  # gaps in the stream sequences of `orders`
    nats_server.publish("orders", _bodies(20, 30))
    payload = run_yaml(SOURCE_PIPELINE % {"url": nats_server.url, "ack": "explicit"})
    assert payload["exit_code"] == 0, payload
    records = read_jsonl(tmp_path / "out")
    assert [json.loads(text(r["payload"]["after"]) or "")["n"] for r in records] == list(range(50))
    sequences = [int(base64.b64decode(r["position"])) for r in records]
    assert sequences == [*range(1, 31), *range(36, 56)]  # the position is the stream sequence
    assert all(int(r["metadata"]["opencdc.createdAt"]) > 0 for r in records)
    consumer = nats_server.consumer_info("ORDERS", "conduit-ns_in")
    assert consumer.num_ack_pending == 0 and consumer.ack_floor.stream_seq == 55
    # The batch log's lag: the durable's undelivered `orders` messages behind each batch of 20
    # sequences (the first batch holds sequences 1-20: 30 of the 50 are left). The middle one is not
    # pinned: its pull overshoots its end across the `other` gap, and those messages are not counted.
    lags = [e.lag["ns:in"] for e in read_batches(PipelineState(tmp_path / "state", "ns"))]
    assert len(lags) == payload["batches"] >= 3
    assert {lag.unit for lag in lags} == {"messages"}
    assert lags[0].value == 30 and lags[-1].value == 0

    nats_server.publish("orders", _bodies(10, 50))  # a new run resumes where the durable acked
    payload = run_yaml(SOURCE_PIPELINE % {"url": nats_server.url, "ack": "explicit"})
    assert payload["exit_code"] == 0, payload
    again = [json.loads(text(r["payload"]["after"]) or "")["n"] for r in read_jsonl(tmp_path / "out")]
    assert again == list(range(60))
    assert nats_server.consumer_info("ORDERS", "conduit-ns_in").ack_floor.stream_seq == 65


def test_committed_messages_a_crashed_run_left_pending_are_acked_once_redelivered(
    run_yaml, tmp_path, nats_server: NatsServer
):
    """A run killed after its batch committed but before it acked leaves the messages pending on the
    durable consumer: the next run acks each when the server redelivers it, even with nothing new to read
    (an explicit ack needs the message's own delivery)."""
    from nats.js.api import AckPolicy, ConsumerConfig

    nats_server.add_stream("ORDERS", ["orders"])
    nats_server.publish("orders", _bodies(20))
    assert run_yaml(SOURCE_PIPELINE % {"url": nats_server.url, "ack": "explicit"})["exit_code"] == 0

    async def crashed_run_pulls(js) -> int:  # another durable holds all 20 unacked: what a killed run leaves
        await js.add_consumer(
            "ORDERS",
            ConsumerConfig(
                durable_name="killed",
                filter_subject="orders",
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=1.0,
                headers_only=True,
            ),
        )
        pull = await js.pull_subscribe_bind("killed", stream="ORDERS")
        return len(await pull.fetch(20, timeout=5))

    assert nats_server.call(crashed_run_pulls) == 20
    time.sleep(1.5)  # past ackWait: the server redelivers them to the next pull
    pipeline = SOURCE_PIPELINE.replace("maxRecordsPerBatch: 20", "maxRecordsPerBatch: 20, durable: killed")
    payload = run_yaml(
        pipeline % {"url": nats_server.url, "ack": "explicit"}
    )  # same checkpoint: all committed
    assert payload["exit_code"] == 0, payload
    assert len(read_jsonl(tmp_path / "out")) == 20  # nothing read again
    consumer = nats_server.consumer_info("ORDERS", "killed")
    assert (consumer.num_ack_pending, consumer.ack_floor.stream_seq) == (0, 20)


def test_an_unknown_stream_is_fatal_and_names_what_to_fix(run_yaml, nats_server: NatsServer):
    url = nats_server.url.replace("nats://", "nats://alice:Pw-s3cret@")
    payload = run_yaml(SOURCE_PIPELINE % {"url": url, "ack": "all"})
    assert payload["exit_code"] == 1, payload
    message = payload["error"]["message"]
    assert "stream 'ORDERS' does not exist" in message and "Pw-s3cret" not in json.dumps(payload)


def test_a_replayed_batch_is_dropped_by_the_duplicate_window(run_yaml, tmp_path, nats_server, monkeypatch):
    nats_server.add_stream("EVENTS", ["events.>"])
    (tmp_path / "udf").mkdir()
    (tmp_path / "udf" / "nats_flaky_sink.py").write_text(FLAKY_SINK)
    flag = tmp_path / "down"
    monkeypatch.setenv("FLAKY_SINK_FLAG", str(flag))
    pipeline = DESTINATION_PIPELINE % {"url": nats_server.url}
    assert run_yaml(pipeline)["exit_code"] == 0
    flag.touch()  # the next batch's sink fails after NATS took it: the batch does not commit
    more = pipeline.replace("recordCount: 30", "recordCount: 50")
    payload = run_yaml(more)
    assert payload["exit_code"] == 75, payload
    assert len(nats_server.stream_bodies("EVENTS")) == 40  # batch 3 reached the stream

    payload = run_yaml(more)  # the replay of batch 3 publishes again: the stream drops it
    assert payload["exit_code"] == 0, payload
    records = [json.loads(body) for body in nats_server.stream_bodies("EVENTS")]
    assert [int(text(r["key"]) or "") for r in records] == list(range(50))  # each once, in order
    assert records[0]["payload"]["after"] is not None and records[0]["operation"] == "create"


def test_nats_as_the_dead_letter_queue(run_yaml, tmp_path, nats_server: NatsServer):
    nats_server.add_stream("DLQ", ["dlq"])
    pipeline = f"""
version: "2.2"
pipelines:
  - id: dl
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {{recordCount: 40, maxRecordsPerBatch: 20}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - id: reject
        plugin: error
        condition: "CAST(.Key AS INT) % 10 = 3"
        settings: {{message: rejected}}
    dead-letter-queue:
      plugin: nats
      settings: {{urls: "{nats_server.url}", subject: dlq}}
      window-size: 10
      window-nack-threshold: 5
"""
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 0, payload
    nacked = [json.loads(body) for body in nats_server.stream_bodies("DLQ")]
    assert [int(text(r["key"]) or "") for r in nacked] == [3, 13, 23, 33]
    assert {r["metadata"]["conduit.dlq.nack.error"] for r in nacked} == {"rejected"}
    assert len(read_jsonl(tmp_path / "out")) == 36


def test_refused_credentials_are_fatal_and_never_shown() -> None:
    from airflow_conduit.engine.connectors.nats._common import Connection
    from airflow_conduit.errors import FatalError
    from tests.servers.nats import start_nats

    server = start_nats(user="alice", password="right-Pw-1")
    try:
        wrong = Connection(urls=(server.url.replace("nats://", "nats://alice:wrong-Pw-2@"),))
        with pytest.raises(FatalError) as caught:
            asyncio.run(wrong.connect(reconnect=True, code="source_failed"))
        assert "refused the credentials" in str(caught.value) and "wrong-Pw-2" not in str(caught.value)
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


# Generator into NATS alone; retryWait short, as a publish nobody takes is retried before it fails.
PUBLISH_PIPELINE = """
version: "2.2"
pipelines:
  - id: np
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 5}}
      - {id: bus, type: destination, plugin: standalone:nats, settings: {urls: "%(url)s", subject: events.out, retryWait: 10ms}}
"""


def _plain_server(root: Path, *options: str) -> NatsServer:
    """A nats-server with ``options`` instead of the fixture's ``-js`` (tests/servers/nats.py always
    enables JetStream)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server = NatsServer(root, int(sock.getsockname()[1]))
    binary = shutil.which("nats-server") or SERVER
    args = [binary, *options, "-a", "127.0.0.1", "-p", str(server.port)]
    server.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            return server
        except OSError:
            if time.monotonic() > deadline or server.process.poll() is not None:
                server.stop()
                raise
            time.sleep(0.05)


def test_a_server_without_jetstream_is_fatal_and_says_to_enable_it(run_yaml, tmp_path):
    # Was transient (exit 75): Airflow restarted the pipeline forever against a server that never answers.
    server = _plain_server(tmp_path)  # no -js
    try:
        payload = run_yaml(SOURCE_PIPELINE % {"url": server.url, "ack": "explicit"})
        assert payload["exit_code"] == 1, payload
        assert "enable JetStream" in payload["error"]["message"], payload

        payload = run_yaml(PUBLISH_PIPELINE % {"url": server.url})
        assert payload["exit_code"] == 1, payload
        assert "enable JetStream" in payload["error"]["message"], payload  # not "no stream captures"
    finally:
        server.stop()


def test_an_account_without_jetstream_is_fatal_and_says_to_enable_it(tmp_path) -> None:
    from airflow_conduit.engine.connectors.nats._common import Connection, classify
    from airflow_conduit.errors import FatalError

    # JetStream on the server, not for account B: it answers 503 "JetStream not enabled for account".
    (tmp_path / "server.conf").write_text(
        'jetstream { store_dir: "%s" }\n'
        "accounts { A { jetstream: enabled, users: [{user: a, password: pa}] }, "
        "B { users: [{user: bob-nojs, password: Pw-b-3}] } }\n" % (tmp_path / "js")
    )
    server = _plain_server(tmp_path, "-c", str(tmp_path / "server.conf"))
    try:
        connection = Connection(urls=(server.url.replace("nats://", "nats://bob-nojs:Pw-b-3@"),))

        async def stream_info() -> None:
            client = await connection.connect(reconnect=False, code="source_failed")
            try:
                await client.jetstream(timeout=5).stream_info("ORDERS")
            finally:
                await client.close()

        with pytest.raises(Exception) as caught:
            asyncio.run(stream_info())
        error = classify(caught.value, connection, "nats source", "source_failed")
        assert isinstance(error, FatalError), error
        assert "JetStream is not enabled for the account" in str(error) and "Pw-b-3" not in str(error)
    finally:
        server.stop()


def test_no_stream_for_the_destination_subject_is_fatal_and_names_it(run_yaml, nats_server: NatsServer):
    nats_server.add_stream("OTHER", ["other.>"])
    payload = run_yaml(PUBLISH_PIPELINE % {"url": nats_server.url})
    assert payload["exit_code"] == 1, payload
    assert "no JetStream stream captures subject 'events.out'" in payload["error"]["message"], payload


def test_the_password_is_never_shown_by_a_good_run_or_a_refused_one(run_yaml, tmp_path, caplog, capfd):
    from tests.credentials import assert_not_shown, capture_logs
    from tests.servers.nats import start_nats

    capture_logs(caplog)
    server = start_nats(user="alice", password="right-Pw-1")
    try:
        url = server.url.replace("//", "//alice:right-Pw-1@")

        async def add_stream() -> None:
            import nats

            client = await nats.connect(url, allow_reconnect=False)  # server.call() has no credentials
            try:
                await client.jetstream().add_stream(name="ORDERS", subjects=["orders"])
                await client.jetstream().publish("orders", b'{"n": 0}')
            finally:
                await client.close()

        asyncio.run(add_stream())
        good = SOURCE_PIPELINE % {"url": url, "ack": "all"}
        ok = run_yaml(good, state_dir=tmp_path / "ok")
        payload = run_yaml(good.replace("right-Pw-1", "wrong-Pw-2"))
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
    assert ok["exit_code"] == 0 and len(read_jsonl(tmp_path / "out")) == 1, ok
    assert payload["exit_code"] == 1 and "refused the credentials" in payload["error"]["message"], payload
    states = [tmp_path / "ok", tmp_path / "state"]
    assert_not_shown(["right-Pw-1", "wrong-Pw-2"], [ok, payload], states, caplog, capfd)
