"""A Redis server stopped in the middle of a run: the run ends transient (exit 75), and once the server is
back the next run delivers every entry exactly once and acks them all (here, not in make test: it stops
and starts a server and takes two runs)."""

from __future__ import annotations

import pytest

from tests.integration.test_redis_connector import add, pending
from tests.servers.redis import durable_redis

__all__ = ["durable_redis"]

pytestmark = pytest.mark.chaos


# In-process runs: the session's Spark start plus two runs, each up to 60 s per blocked Redis socket.
@pytest.mark.timeout(900)
def test_server_stopped_mid_run_is_transient_and_the_next_run_loses_nothing(
    run_yaml, durable_redis, tmp_path
):
    """Redis source to Redis destination on one server, which a processor shuts down while the second
    batch is computed; restarted, the next run delivers every entry exactly once and acks them all."""
    server = durable_redis
    add(server, "in", 0, 30)
    flag = tmp_path / "shutdown"
    flag.touch()
    (tmp_path / "udf").mkdir()
    (tmp_path / "udf" / "outage.py").write_text(
        "import os, redis\n"
        "def apply(record):\n"
        f"    if record['payload']['after'] and b'\"n\":\"15\"' in record['payload']['after'] and os.path.exists({str(flag)!r}):\n"
        f"        os.unlink({str(flag)!r})\n"
        "        try:\n"
        f"            redis.Redis(port={server.port}).shutdown()\n"
        "        except redis.exceptions.ConnectionError:\n"
        "            pass\n"
        "    return record\n"
    )
    pipeline = f"""
version: "2.2"
pipelines:
  - id: ro
    connectors:
      - {{id: in, type: source, plugin: redis, settings: {server.settings("in", maxRecordsPerBatch="10")}}}
      - {{id: out, type: destination, plugin: redis, settings: {server.settings("out")}}}
    processors:
      - {{id: outage, plugin: custom.python, settings: {{function: "outage:apply", path: "{{tmp}}/udf"}}}}
"""
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 75, payload
    assert payload["error"]["kind"] == "transient" and "unreachable" in payload["error"]["message"]
    server.start()
    client = server.client()
    assert client.xlen("out") == 10  # the first batch only
    assert pending(server, "in", "conduit-ro-in") >= 10  # the failed batch is still pending

    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 0, payload
    numbers = [int(f[b"n"]) for _, f in client.xrange("out")]
    assert numbers == list(range(30))
    assert pending(server, "in", "conduit-ro-in") == 0
