"""Throughput of ``standalone:nats`` beside nats-py alone (the ceiling), on a throwaway nats-server.

(a) NATS source -> file destination: messages/s of a pipeline run until idle over ``n`` messages;
(b) file source -> NATS destination: messages/s of a pipeline publishing an ``n``-line file;
(c) nats-py in one process: a bulk read of the same ``n`` messages (an ephemeral pull consumer, batches
    of 5,000) and a bulk publish (1,000 acked publishes in flight, as the destination does).

The pipeline figures include the micro-batches' fixed costs (query start, offset and commit logs).

    .venv/bin/python benchmarks/broker_nats.py [--records N]
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from brokers import figures, run_one  # noqa: E402  (this folder is on sys.path when run)

from tests.servers.nats import NatsServer, start_nats  # noqa: E402

BODY = b'{"id": %d, "customer": "customer-%d", "amount_cents": 1234, "express": true}'


def _run(spark: Any, yaml_text: str, workdir: Path) -> float:
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import RunOptions
    from airflow_conduit.engine.runner import run_pipeline

    config = load_pipeline_text(yaml_text, str(workdir / "pipeline.yaml")).pipelines[0]
    started = time.perf_counter()
    payload = run_pipeline(spark, config, workdir / "state", RunOptions(until_idle=True))
    elapsed = time.perf_counter() - started
    if payload["exit_code"] != 0:
        raise RuntimeError(f"the pipeline failed: {payload}")
    return elapsed


async def _client_read(url: str, n: int) -> float:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    client = await nats.connect(url)
    js = client.jetstream()
    started = time.perf_counter()
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, mem_storage=True)
    sub = await js.pull_subscribe("bench.in", stream="BENCH_IN", config=config)
    got = 0
    while got < n:
        got += len(await sub.fetch(min(5_000, n - got), timeout=10))
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed


async def _client_write(url: str, n: int) -> float:
    import nats

    client = await nats.connect(url)
    js = client.jetstream()
    started = time.perf_counter()
    for first in range(0, n, 1_000):
        sends = [js.publish("bench.ceiling", BODY % (i, i)) for i in range(first, min(first + 1_000, n))]
        await asyncio.gather(*sends)
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed


def bench(n: int) -> dict:
    """Messages/s of (a), (b) and (c), and the ratios (a)/(c_read) and (b)/(c_write)."""
    from airflow_conduit.engine.session import get_session

    server: NatsServer = start_nats()
    workdir = Path(tempfile.mkdtemp(prefix="bench-nats-"))
    try:
        server.add_stream("BENCH_IN", ["bench.in"])
        server.add_stream("BENCH_OUT", ["bench.out", "bench.ceiling"])
        server.publish("bench.in", [BODY % (i, i) for i in range(n)])
        (workdir / "in").mkdir()
        (workdir / "in" / "lines.txt").write_bytes(b"".join(BODY % (i, i) + b"\n" for i in range(n)))
        spark = get_session("local[2]")
        source = f"""
version: "2.2"
pipelines:
  - id: bench-nats-source
    connectors:
      - {{id: in, type: source, plugin: nats, settings: {{urls: "{server.url}", stream: BENCH_IN, subject: bench.in, ackPolicy: all}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{workdir}/out"}}}}
"""
        destination = f"""
version: "2.2"
pipelines:
  - id: bench-nats-destination
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{workdir}/in"}}}}
      - {{id: out, type: destination, plugin: nats, settings: {{urls: "{server.url}", subject: bench.out}}}}
"""
        read_s = _run(spark, source, workdir / "a")
        write_s = _run(spark, destination, workdir / "b")
        client_read_s = asyncio.run(_client_read(server.url, n))
        client_write_s = asyncio.run(_client_write(server.url, n))
        return figures(n, n / read_s, n / write_s, n / client_read_s, n / client_write_s)
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    run_one("nats", bench)


if __name__ == "__main__":
    main()
