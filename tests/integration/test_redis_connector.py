"""``standalone:redis`` (stream mode) on real Spark and a real Redis server (tests/servers/redis.py): the
source through a consumer group acked after commit, the destination exactly once by its marker, Redis as
the DLQ, and the settings refused at load (a server stopped mid-run: tests/chaos/test_redis_outage.py)."""

from __future__ import annotations

import json

import pytest

from airflow_conduit.batch_log import SourceLag, read_batches
from airflow_conduit.config import ConfigError, load_pipeline_text
from airflow_conduit.engine.connectors.redis_streams import destination as redis_destination
from airflow_conduit.errors import TransientError
from airflow_conduit.state import PipelineState
from tests.conftest import read_jsonl, text
from tests.servers.redis import RedisServer, redis_server

pytestmark = pytest.mark.brokers  # make brokers

__all__ = ["redis_server"]  # a fixture, imported to be used


def source_pipeline(server: RedisServer, key: str, batch: int = 10, extra: str = "") -> str:
    return f"""
version: "2.2"
pipelines:
  - id: rs
    connectors:
      - {{id: in, type: source, plugin: redis, settings: {server.settings(key, maxRecordsPerBatch=str(batch))}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
{extra}"""


def add(server: RedisServer, key: str, start: int, end: int) -> list[str]:
    client = server.client()
    return [client.xadd(key, {"n": str(i), "word": f"w{i}"}).decode() for i in range(start, end)]


def pending(server: RedisServer, key: str, group: str) -> int:
    return int(server.client().xpending(key, group)["pending"])


def test_source_reads_each_entry_once_and_acks_after_commit(run_yaml, redis_server, tmp_path):
    ids = add(redis_server, "src1", 0, 25)
    payload = run_yaml(source_pipeline(redis_server, "src1"))
    assert payload["exit_code"] == 0, payload
    records = read_jsonl(tmp_path / "out")
    assert [text(r["position"]) for r in records] == ids
    assert [json.loads(text(r["payload"]["after"])) for r in records] == [
        {"n": str(i), "word": f"w{i}"} for i in range(25)
    ]
    first = records[0]
    assert text(first["key"]) == "src1" and first["operation"] == "create"
    assert first["metadata"]["key"] == "src1"
    assert first["metadata"]["opencdc.createdAt"] == str(int(ids[0].split("-")[0]) * 1_000_000)
    assert payload["batches"] == 3
    assert pending(redis_server, "src1", "conduit-rs-in") == 0  # every batch committed, so acked
    # The batch log's lag: the group's undelivered entries behind each batch of 10 (25 in all).
    lags = [e.lag["rs:in"] for e in read_batches(PipelineState(tmp_path / "state", "rs"))]
    assert lags == [SourceLag(15.0, "entries"), SourceLag(5.0, "entries"), SourceLag(0.0, "entries")]

    more = add(redis_server, "src1", 25, 30)
    payload = run_yaml(source_pipeline(redis_server, "src1"))
    assert payload["exit_code"] == 0, payload
    assert [text(r["position"]) for r in read_jsonl(tmp_path / "out")] == ids + more
    assert pending(redis_server, "src1", "conduit-rs-in") == 0


def test_source_leaves_a_failed_batch_pending_and_reads_it_on_restart(run_yaml, redis_server, tmp_path):
    """A batch the destination refused is not acked: its entries stay pending, and come out next run."""
    ids = add(redis_server, "src2", 0, 20)
    flag = tmp_path / "fail"
    (tmp_path / "udf").mkdir()
    (tmp_path / "udf" / "redis_flaky.py").write_text(
        "import os\nfrom airflow_conduit.errors import TransientError\n"
        f"def sink(records, delivery_hash):\n    if os.path.exists({str(flag)!r}):\n"
        "        raise TransientError('sink down')\n"
    )
    extra = (
        '      - {id: sink, type: destination, plugin: custom.python, settings: {function: "redis_flaky:sink", '
        'path: "{tmp}/udf"}}\n'
    )
    flag.touch()
    payload = run_yaml(source_pipeline(redis_server, "src2", extra=extra))
    assert payload["exit_code"] == 75, payload
    assert pending(redis_server, "src2", "conduit-rs-in") == 10  # the first batch: handed out, not acked
    flag.unlink()
    payload = run_yaml(source_pipeline(redis_server, "src2", extra=extra))
    assert payload["exit_code"] == 0, payload
    assert [text(r["position"]) for r in read_jsonl(tmp_path / "out")] == ids  # once each
    assert pending(redis_server, "src2", "conduit-rs-in") == 0


def destination_pipeline(server: RedisServer, key: str, count: int) -> str:
    return f"""
version: "2.2"
pipelines:
  - id: rd
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {{recordCount: {count}, maxRecordsPerBatch: 10, "format.options.id": int, "format.options.name": string}}}}
      - {{id: out, type: destination, plugin: standalone:redis, settings: {server.settings(key)}}}
"""


def test_destination_writes_payload_fields_and_skips_a_replayed_batch(
    run_yaml, redis_server, tmp_path, monkeypatch
):
    publish = redis_destination.StagedEntries.publish
    calls = {"n": 0}

    def publish_then_fail(self: redis_destination.StagedEntries) -> int:
        written = publish(self)  # EXEC ran: the entries and the marker are in Redis
        calls["n"] += 1
        if calls["n"] == 2:
            raise TransientError("lost before the engine committed")
        return written

    monkeypatch.setattr(redis_destination.StagedEntries, "publish", publish_then_fail)
    payload = run_yaml(destination_pipeline(redis_server, "dst1", 30))
    assert payload["exit_code"] == 75, payload
    client = redis_server.client()
    assert client.xlen("dst1") == 20  # batch 1 reached Redis, then the run failed before its commit

    payload = run_yaml(destination_pipeline(redis_server, "dst1", 30))
    assert payload["exit_code"] == 0, payload
    entries = client.xrange("dst1")
    assert len(entries) == 30  # the replayed batch 1 was skipped by its marker: each record once
    fields = [{k.decode(): v.decode() for k, v in f.items()} for _, f in entries]
    assert sorted(fields[0]) == ["id", "name"] and fields[0]["id"].isdigit()
    assert len({json.dumps(f, sort_keys=True) for f in fields}) == 30
    events = [
        json.loads(line) for line in (tmp_path / "state" / "rd" / "audit.jsonl").read_text().splitlines()
    ]
    assert [(e["batch"], e["destinations"]) for e in events if e.get("event") == "delivery_skipped"] == [
        (1, ["out"])
    ]
    assert client.hget("dst1:conduit-delivery", "rd:out") is not None


def test_redis_as_the_dead_letter_queue(run_yaml, redis_server, tmp_path):
    pipeline = f"""
version: "2.2"
pipelines:
  - id: rq
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator, settings: {{recordCount: 20, "format.options.id": int}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - id: reject
        plugin: error
        condition: "CAST(.Key AS INT) IN (3, 7, 11)"
        settings: {{message: rejected}}
    dead-letter-queue:
      plugin: redis
      settings: {redis_server.settings("dlq1")}
      window-size: 10
      window-nack-threshold: 5
"""
    payload = run_yaml(pipeline)
    assert payload["exit_code"] == 0, payload
    assert payload["records"]["dlq"] == 3
    entries = redis_server.client().xrange("dlq1")
    assert len(entries) == 3
    # A DLQ record's payload is the failed record (as in Conduit): its parts become the entry's fields.
    assert [set(f) for _, f in entries] == [{b"position", b"operation", b"metadata", b"key", b"payload"}] * 3
    # The nack error is in the DLQ record's own metadata, which an entry does not carry (as in Conduit).
    metadata = json.loads(entries[0][1][b"metadata"])
    assert metadata["conduit.source.connector.id"] == "rq:gen"
    assert [text(f[b"key"].decode()) for _, f in entries] == ["3", "7", "11"]  # raw: base64 text
    assert len(read_jsonl(tmp_path / "out")) == 17


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ('{"redis.key": "k"}', "only mode 'stream' is supported"),
        ('{"redis.key": "k", "mode": "pubsub"}', "pub/sub channel keeps no message"),
        ('{"mode": "stream"}', "'redis.key' is missing"),
        ('{"redis.key": "k", "mode": "stream", "redis.port": "0"}', "redis.port"),
    ],
)
def test_settings_refused_at_load(settings, message):
    text_ = f"""
version: "2.2"
pipelines:
  - id: bad
    connectors:
      - {{id: in, type: source, plugin: redis, settings: {settings}}}
      - {{id: out, type: destination, plugin: builtin:log}}
"""
    with pytest.raises(ConfigError) as raised:
        load_pipeline_text(text_, "bad.yaml")
    assert message in str(raised.value) and "bad.yaml" in str(raised.value)


def test_password_never_shown_and_a_wrong_one_is_fatal(run_yaml, tmp_path, caplog, capfd):
    from tests.credentials import assert_not_shown, capture_logs
    from tests.servers.redis import destroy, start_redis

    capture_logs(caplog)
    server = start_redis(password="right-Pw-1")
    try:
        add(server, "k", 0, 3)
        ok = run_yaml(source_pipeline(server, "k"), state_dir=tmp_path / "ok")
        server.password = "wrong-Pw-2"  # the settings carry a wrong one
        payload = run_yaml(source_pipeline(server, "k"))
    finally:
        destroy(server)
    assert ok["exit_code"] == 0 and len(read_jsonl(tmp_path / "out")) == 3, ok
    assert payload["exit_code"] == 1, payload
    assert "redis.password" in payload["error"]["message"]
    states = [tmp_path / "ok", tmp_path / "state"]
    assert_not_shown(["right-Pw-1", "wrong-Pw-2"], [ok, payload], states, caplog, capfd)


def test_a_key_that_is_not_a_stream_is_fatal_and_named(run_yaml, redis_server):
    redis_server.client().set("plain", "text")
    payload = run_yaml(source_pipeline(redis_server, "plain"))
    assert payload["exit_code"] == 1, payload
    assert "'plain' holds a string, not a stream" in payload["error"]["message"]
