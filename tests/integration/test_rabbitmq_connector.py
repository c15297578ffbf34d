"""``standalone:rabbitmq`` against a real RabbitMQ node (tests/servers/rabbitmq.py) and real local Spark:
the source (acked only after commit), the destination (publisher confirms, message ids stable across a
replay), RabbitMQ as the DLQ, errors classified, and a server stopped mid-run."""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pytest

from airflow_conduit.batch_log import read_batches
from airflow_conduit.state import PipelineState
from tests.conftest import read_jsonl
from tests.credentials import assert_not_shown, capture_logs
from tests.servers.rabbitmq import PASSWORD, RabbitNode, rabbit_node  # noqa: F401 - the `rabbit` fixture

pytestmark = pytest.mark.brokers  # make brokers

SOURCE_PIPELINE = """
version: "2.2"
pipelines:
  - id: rabbit-in
    connectors:
      - id: mq
        type: source
        plugin: rabbitmq
        settings:
          url: "URL"
          queue.name: QUEUE
          maxRecordsPerBatch: 7
          idleWait: 300ms
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{tmp}/out"
"""

DESTINATION_PIPELINE = """
version: "2.2"
pipelines:
  - id: rabbit-out
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "COUNT"
          maxRecordsPerBatch: 10
      - id: mq
        type: destination
        plugin: standalone:rabbitmq
        settings:
          url: "URL"
          queue.name: QUEUE
    processors:
      - id: team
        plugin: field.set
        settings:
          field: '.Metadata["rabbitmq.header.team"]'
          value: core
"""


def publish(node: RabbitNode, queue: str, bodies: list[bytes], **properties: Any) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    try:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        for i, body in enumerate(bodies):
            props = pika.BasicProperties(
                message_id=f"id-{i}", headers={"n": str(i)}, delivery_mode=2, **properties
            )
            channel.basic_publish("", queue, body, props)
    finally:
        conn.close()


def drain(node: RabbitNode, queue: str) -> list[tuple[Any, bytes]]:
    """Every message in the queue (properties, body), acked."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    got = []
    try:
        channel = conn.channel()
        while True:
            method, props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got.append((props, body))
    finally:
        conn.close()


def bodies_of(records: list[dict[str, Any]]) -> list[str]:
    return [base64.b64decode(r["payload"]["after"]).decode() for r in records]


def fresh_queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def source_yaml(node: RabbitNode, queue: str, extra: str = "") -> str:
    text = SOURCE_PIPELINE.replace("URL", node.url()).replace("QUEUE", queue)
    return text.replace("          idleWait: 300ms\n", "          idleWait: 300ms\n" + extra)


def test_source_reads_every_message_in_order_and_acks_after_commit(rabbit, run_yaml, tmp_path) -> None:
    queue = fresh_queue()
    sent = [f"m-{i}".encode() for i in range(30)]
    publish(rabbit, queue, sent, content_type="text/plain")
    payload = run_yaml(source_yaml(rabbit, queue))
    assert payload["exit_code"] == 0, payload
    records = read_jsonl(tmp_path / "out")
    assert bodies_of(records) == [b.decode() for b in sent]
    first = records[0]
    assert first["operation"] == "create"
    assert base64.b64decode(first["key"]).decode() == "id-0"
    meta = first["metadata"]
    assert meta["rabbitmq.queueName"] == queue
    assert meta["rabbitmq.contentType"] == "text/plain"
    assert meta["rabbitmq.header.n"] == "0"
    assert meta["rabbitmq.redelivered"] == "false"
    assert meta["rabbitmq.routingKey"] == queue
    positions = [json.loads(base64.b64decode(r["position"])) for r in records]
    assert len({(p["run"], p["deliveryTag"]) for p in positions}) == 30
    assert all(p["queueName"] == queue for p in positions)
    assert payload["batches"] >= 5  # maxRecordsPerBatch 7
    # The queue's depth is the source's lag in the batch log: it ends at zero.
    lags = [e.lag["rabbit-in:mq"] for e in read_batches(PipelineState(tmp_path / "state", "rabbit-in"))]
    assert {lag.unit for lag in lags} == {"messages"} and lags[-1].value == 0 and lags[0].value > 0
    # Every message acked, the last batch's too: nothing ready, nothing unacked.
    counts = rabbit.queue_counts(queue)
    assert (counts.ready, counts.unacked) == (0, 0)
    again = run_yaml(source_yaml(rabbit, queue))
    assert again["exit_code"] == 0 and len(read_jsonl(tmp_path / "out")) == 30


def test_destination_publishes_with_confirms_and_headers(rabbit, run_yaml) -> None:
    queue = fresh_queue()
    text = DESTINATION_PIPELINE.replace("URL", rabbit.url()).replace("QUEUE", queue).replace("COUNT", "25")
    payload = run_yaml(text)
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["written"] == {"rabbit-out:mq": 25}
    got = drain(rabbit, queue)
    assert len(got) == 25
    bodies = [json.loads(body) for _, body in got]
    assert [base64.b64decode(b["position"]).decode() for b in bodies] == [str(i) for i in range(25)]
    assert all(set(b["payload"]["after"]) == {"id", "name"} for b in bodies)
    props = [p for p, _ in got]
    assert all(p.content_type == "application/json" and p.delivery_mode == 2 for p in props)
    assert all(p.headers == {"team": "core"} for p in props)
    ids = [p.message_id for p in props]
    assert len(set(ids)) == 25 and all(len(i.split("-")[0]) == 64 for i in ids)


def test_destination_message_ids_are_the_same_on_a_replay(rabbit, run_yaml, tmp_path, monkeypatch) -> None:
    """A batch published and then failed (injected) is published again on restart with the same ids."""
    from airflow_conduit.engine.connectors.rabbitmq import destination
    from airflow_conduit.errors import TransientError

    queue = fresh_queue()
    text = DESTINATION_PIPELINE.replace("URL", rabbit.url()).replace("QUEUE", queue).replace("COUNT", "10")
    real_publish = destination.StagedMessages.publish

    def publish_then_fail(self: Any) -> int:
        real_publish(self)
        raise TransientError("injected: the batch failed after its messages were published")

    monkeypatch.setattr(destination.StagedMessages, "publish", publish_then_fail)
    failed = run_yaml(text)
    assert failed["exit_code"] == 75, failed
    monkeypatch.undo()
    done = run_yaml(text)
    assert done["exit_code"] == 0, done
    got = drain(rabbit, queue)
    ids = Counter(p.message_id for p, _ in got)
    assert len(got) == 20 and set(ids.values()) == {2}  # each message twice, under one id
    by_id: dict[str, set[bytes]] = {}
    for props, body in got:
        by_id.setdefault(props.message_id, set()).add(
            json.dumps({k: v for k, v in json.loads(body).items() if k != "metadata"}).encode()
        )
    assert all(len(variants) == 1 for variants in by_id.values())


def test_rabbitmq_as_the_dlq(rabbit, run_yaml) -> None:
    dlq_queue = fresh_queue()
    text = f"""
version: "2.2"
pipelines:
  - id: rabbit-dlq
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "12"
      - id: out
        type: destination
        plugin: builtin:log
    processors:
      - id: boom
        plugin: error
        condition: 'cast(cast(.Position as string) as int) % 4 = 0'
        settings:
          message: "refused"
    dead-letter-queue:
      plugin: rabbitmq
      settings:
        url: "{rabbit.url()}"
        queue.name: {dlq_queue}
      window-size: 10
      window-nack-threshold: 5
"""
    payload = run_yaml(text)
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["dlq"] == 3
    got = drain(rabbit, dlq_queue)
    records = [json.loads(body) for _, body in got]
    assert sorted(base64.b64decode(r["position"]).decode() for r in records) == ["0", "4", "8"]
    assert all(r["metadata"]["conduit.dlq.nack.error"].endswith("refused") for r in records)


def test_bad_password_is_fatal_and_never_shown(rabbit, run_yaml, tmp_path, caplog, capfd) -> None:
    capture_logs(caplog)
    queue = fresh_queue()
    publish(rabbit, queue, [b"one"])
    ok = run_yaml(source_yaml(rabbit, queue), state_dir=tmp_path / "ok")
    assert ok["exit_code"] == 0 and len(read_jsonl(tmp_path / "out")) == 1, ok
    url = rabbit.url(password="wrong-Secret-99")
    text = SOURCE_PIPELINE.replace("URL", url).replace("QUEUE", queue)
    payload = run_yaml(text)
    assert payload["exit_code"] == 1, payload
    message = payload["error"]["message"]
    assert "authentication failed" in message
    states = [tmp_path / "ok", tmp_path / "state"]
    assert_not_shown(["wrong-Secret-99", PASSWORD], [ok, payload], states, caplog, capfd)


def test_missing_queue_is_fatal_with_what_to_fix(rabbit, run_yaml) -> None:
    queue = fresh_queue()
    payload = run_yaml(source_yaml(rabbit, queue, "          queue.skipDeclare: true\n"))
    assert payload["exit_code"] == 1, payload
    assert "not found" in payload["error"]["message"] and queue in payload["error"]["message"]
    assert PASSWORD not in json.dumps(payload)


def test_auto_ack_is_refused_at_load(tmp_path) -> None:
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.config.errors import ConfigError

    text = SOURCE_PIPELINE.replace("URL", "amqp://u:p@127.0.0.1:1/%2F").replace("QUEUE", "q")
    text = text.replace("idleWait: 300ms", "consumer.autoAck: true")
    with pytest.raises(ConfigError) as refused:
        load_pipeline_text(text, str(tmp_path / "p.yaml"))
    assert "consumer.autoAck" in str(refused.value) and "acked only after" in str(refused.value)


STOPPER = '''
import json, os, subprocess

def stop_at(record):
    """Stops the RabbitMQ node's AMQP side when the marked record passes (once)."""
    after = record["payload"]["after"]
    text = after.decode() if isinstance(after, bytes) else json.dumps(after)
    flag = os.path.join(os.path.dirname(__file__), "stopped")
    if MARK in text and not os.path.exists(flag):
        open(flag, "w").close()
        env = json.load(open(os.path.join(os.path.dirname(__file__), "env.json")))
        subprocess.run([CTL, "-q", "stop_app"], env=env, check=True, capture_output=True)
    return record
'''


def stopper(node: RabbitNode, directory: Path, mark: str) -> str:
    from tests.servers.rabbitmq import CTL

    directory.mkdir()
    (directory / "env.json").write_text(json.dumps(node.env()))
    code = STOPPER.replace("MARK", repr(mark)).replace("CTL", repr(str(CTL)))
    # A module name of its own: Spark's Python workers live on, with the modules they imported.
    module = f"rabbit_stopper_{uuid.uuid4().hex[:8]}"
    (directory / f"{module}.py").write_text(code)
    return f"""
    processors:
      - id: stopper
        plugin: custom.python
        settings:
          function: {module}:stop_at
          path: "{directory}"
"""


def test_server_stopped_mid_run_is_transient_and_nothing_is_lost(rabbit, run_yaml, tmp_path) -> None:
    queue = fresh_queue()
    sent = [f"s-{i}".encode() for i in range(40)]
    publish(rabbit, queue, sent)
    text = source_yaml(rabbit, queue) + stopper(rabbit, tmp_path / "code", "s-12")
    try:
        failed = run_yaml(text)
    finally:
        rabbit.ctl("start_app")
    assert failed["exit_code"] == 75, failed
    assert failed["error"]["kind"] == "transient" and PASSWORD not in json.dumps(failed)
    done = run_yaml(text)
    assert done["exit_code"] == 0, done
    seen = Counter(bodies_of(read_jsonl(tmp_path / "out")))
    assert set(seen) == {b.decode() for b in sent}  # none lost (some may come twice: at least once)
    counts = rabbit.queue_counts(queue)
    assert (counts.ready, counts.unacked) == (0, 0)


def test_destination_server_stopped_mid_run_then_completes(rabbit, run_yaml, tmp_path) -> None:
    queue = fresh_queue()
    text = DESTINATION_PIPELINE.replace("URL", rabbit.url()).replace("QUEUE", queue).replace("COUNT", "30")
    text += stopper(rabbit, tmp_path / "code", '"name"').replace("    processors:\n", "")
    # The stopper runs after field.set: the node stops while the first batch is staged, before publish.
    try:
        failed = run_yaml(text)
    finally:
        rabbit.ctl("start_app")
    assert failed["exit_code"] == 75, failed
    done = run_yaml(text)
    assert done["exit_code"] == 0, done
    got = drain(rabbit, queue)
    positions = {base64.b64decode(json.loads(body)["position"]).decode() for _, body in got}
    assert positions == {str(i) for i in range(30)}
