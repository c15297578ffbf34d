"""Throughput of the ``standalone:redis`` connector beside redis-py doing the same bulk work, same run.

On a throwaway Redis server (tests/servers/redis.py) and a local[2] SparkSession:

(a) Redis stream source -> file destination, until idle (a consumer group, acked after commit);
(b) file source (JSON lines) -> Redis stream destination (XADDs and the marker in one MULTI/EXEC);
(c) the ceiling: redis-py in this one process, reading the same entries through a consumer group
    (``XREADGROUP`` and ``XACK``, 10 000 a round trip) and writing them (pipelined ``XADD``).

Messages of two string fields (``n``, ``word``). Prints messages/s and the ratios (a)/(c_read) and
(b)/(c_write).

    .venv/bin/python benchmarks/broker_redis.py [--records N]
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]
from brokers import figures, run_one  # noqa: E402  (this folder is on sys.path when run)

CHUNK = 10_000


def _fields(i: int) -> dict[str, str]:
    return {"n": str(i), "word": f"word-{i}"}


def client_write(client: Any, key: str, n: int) -> float:
    started = time.perf_counter()
    for start in range(0, n, CHUNK):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + CHUNK)):
            pipe.xadd(key, _fields(i))
        pipe.execute()
    return n / (time.perf_counter() - started)


def client_read(client: Any, key: str, n: int) -> float:
    client.xgroup_create(key, "ceiling", id="0")
    started, read = time.perf_counter(), 0
    while read < n:
        reply = client.xreadgroup("ceiling", "c", {key: ">"}, count=CHUNK)
        entries = reply[0][1] if reply else []
        if not entries:
            break
        [json.dumps({k.decode(): v.decode() for k, v in fields.items()}) for _, fields in entries]
        client.xack(key, "ceiling", *(entry_id for entry_id, _ in entries))
        read += len(entries)
    assert read == n, read
    return n / (time.perf_counter() - started)


def _run(spark: Any, text: str, state: Path) -> dict[str, Any]:
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import RunOptions
    from airflow_conduit.engine.runner import run_pipeline

    config = load_pipeline_text(text, str(state / "bench.yaml")).pipelines[0]
    payload = run_pipeline(spark, config, state, RunOptions(until_idle=True))
    assert payload["exit_code"] == 0, payload
    return payload


def _pipeline(pid: str, source: str, destination: str) -> str:
    return f"""
version: "2.2"
pipelines:
  - id: {pid}
    connectors:
      - {{id: in, type: source, {source}}}
      - {{id: out, type: destination, {destination}}}
"""


def bench(n: int = 100_000) -> dict[str, float]:
    from airflow_conduit.engine.session import get_session
    from tests.servers.redis import destroy, start_redis

    logging.getLogger("py4j").setLevel(logging.WARNING)
    server = start_redis()
    work = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    spark = get_session("local[2]")
    try:
        client = server.client()
        redis_in = f"plugin: standalone:redis, settings: {server.settings('warm')}"
        # Warm-up: a small run of each pipeline, so that module imports and JIT are not timed.
        client_write(client, "warm", 100)
        _run(
            spark,
            _pipeline("warm", redis_in, f'plugin: builtin:file, settings: {{path: "{work}/warm"}}'),
            work / "w",
        )

        c_write = client_write(client, "in", n)
        c_read = client_read(client, "in", n)

        source = f"plugin: standalone:redis, settings: {server.settings('in')}"
        started = time.perf_counter()
        payload = _run(
            spark,
            _pipeline("a", source, f'plugin: builtin:file, settings: {{path: "{work}/out"}}'),
            work / "a",
        )
        a = n / (time.perf_counter() - started)
        assert payload["records"]["read"] == n, payload

        lines = work / "lines.jsonl"
        lines.write_text("".join(json.dumps(_fields(i)) + "\n" for i in range(n)))
        destination = f"plugin: standalone:redis, settings: {server.settings('written')}"
        started = time.perf_counter()
        _run(
            spark,
            _pipeline("b", f'plugin: builtin:file, settings: {{path: "{lines}"}}', destination),
            work / "b",
        )
        b = n / (time.perf_counter() - started)
        assert client.xlen("written") == n
    finally:
        destroy(server)
        shutil.rmtree(work, ignore_errors=True)
    return figures(n, a, b, c_read, c_write)


def main() -> None:
    run_one("redis", bench)


if __name__ == "__main__":
    main()
