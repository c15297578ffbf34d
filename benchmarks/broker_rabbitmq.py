"""Throughput of ``standalone:rabbitmq`` beside pika doing the same bulk work in one Python process.

On a throwaway RabbitMQ node (tests/servers/rabbitmq.py), ``n`` messages each way, in one run:

(a) the RabbitMQ source to the file destination (directory of JSON lines), ``airflow-conduit``'s engine
    in-process, until idle, the queue filled beforehand;
(b) the file source (the records (a) wrote) to the RabbitMQ destination;
(c) the ceiling: pika alone, (c_read) consuming the queue with the same prefetch and manual acks (one
    ``multiple`` ack per batch), (c_write) publishing the same bodies without confirms (the destination
    waits for confirms, up to 2000 in flight; pika's blocking publish in confirm mode waits for each
    one and is far slower, about 100 messages/s here).

Printed as messages/s and the ratios (a)/(c_read), (b)/(c_write). ``bench(n)`` returns them as a dict.

    .venv/bin/python benchmarks/broker_rabbitmq.py [--records N]
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from brokers import figures, run_one  # noqa: E402  (this folder is on sys.path when run)

from tests.servers.rabbitmq import RabbitNode, start_node  # noqa: E402

BATCH = 10_000
SOURCE_PIPELINE = """
version: "2.2"
pipelines:
  - id: bench-rabbit-in
    connectors:
      - id: mq
        type: source
        plugin: rabbitmq
        settings:
          url: "{url}"
          queue.name: bench-in
          maxRecordsPerBatch: {batch}
          idleWait: 200ms
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""
DESTINATION_PIPELINE = """
version: "2.2"
pipelines:
  - id: bench-rabbit-out
    connectors:
      - id: files
        type: source
        plugin: builtin:file
        settings:
          path: "{src}"
          maxRecordsPerBatch: {batch}
      - id: mq
        type: destination
        plugin: rabbitmq
        settings:
          url: "{url}"
          queue.name: bench-out
"""


def _body(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"name-{i}", "amount": i % 1000}).encode()


def _fill(node: RabbitNode, queue: str, n: int) -> float:
    """Publish ``n`` persistent messages with pika alone, without confirms, then one round trip so the
    server has read them all; returns messages/s. An upper bound on what pika can write (the
    destination also waits for the server's confirms)."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = conn.channel()
    channel.queue_declare(queue, durable=True)
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    started = time.perf_counter()
    for i in range(n):
        channel.basic_publish("", queue, _body(i), props)
    channel.queue_declare(queue, passive=True)
    seconds = time.perf_counter() - started
    conn.close()
    return n / seconds


def _drain(node: RabbitNode, queue: str, n: int, batch: int) -> float:
    """Consume ``n`` messages with manual acks, one ``multiple`` ack per batch; messages/s (read ceiling)."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=min(65_535, 2 * batch))
    started = time.perf_counter()
    for got, (method, _props, _body_bytes) in enumerate(channel.consume(queue, auto_ack=False), start=1):
        if got % batch == 0 or got == n:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if got == n:
            break
    seconds = time.perf_counter() - started
    channel.cancel()
    conn.close()
    return n / seconds


def _purge(node: RabbitNode, queue: str) -> None:
    node.ctl("purge_queue", queue, check=False)


def _run(spark: Any, text: str, state: Path) -> tuple[dict[str, Any], float]:
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import RunOptions
    from airflow_conduit.engine.runner import run_pipeline

    config = load_pipeline_text(text, str(state / "pipeline.yaml")).pipelines[0]
    started = time.perf_counter()
    payload = run_pipeline(spark, config, state, RunOptions(until_idle=True))
    return payload, time.perf_counter() - started


def bench(n: int = 20_000) -> dict[str, float]:
    from airflow_conduit.engine.session import get_session

    logging.basicConfig(level=logging.WARNING)
    node = start_node()
    spark = get_session("local[2]")
    work = Path(tempfile.mkdtemp(prefix="bench-rabbit-"))
    try:
        batch = min(BATCH, n)
        write_ceiling = _fill(node, "ceiling", n)
        read_ceiling = _drain(node, "ceiling", n, batch)

        _fill(node, "bench-in", n)
        out = work / "out"
        payload, seconds = _run(
            spark, SOURCE_PIPELINE.format(url=node.url(), out=out, batch=batch), work / "state-in"
        )
        assert payload["exit_code"] == 0 and payload["records"]["read"] == n, payload
        source_rate = n / seconds

        payload, seconds = _run(
            spark, DESTINATION_PIPELINE.format(url=node.url(), src=out, batch=batch), work / "state-out"
        )
        assert payload["exit_code"] == 0 and payload["records"]["read"] == n, payload
        destination_rate = n / seconds
        assert node.queue_counts("bench-out").ready == n
        return figures(n, source_rate, destination_rate, read_ceiling, write_ceiling)
    finally:
        spark.stop()
        node.destroy()


def main() -> None:
    run_one("rabbitmq", bench)


if __name__ == "__main__":
    main()
