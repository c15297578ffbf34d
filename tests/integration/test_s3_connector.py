"""``builtin:s3`` source and destination against moto's S3 server (tests/servers/moto_s3.py) on real
local Spark: snapshot then changes, records shaped as Conduit's, an object per batch written exactly
once, the DLQ, and errors classified without the credentials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import read_jsonl, text
from tests.credentials import assert_not_shown, capture_logs
from tests.servers.moto_s3 import SECRET_KEY, MotoS3, moto_s3

pytestmark = pytest.mark.brokers  # make brokers

__all__ = ["moto_s3"]  # the fixture, used by name

SOURCE = """
version: "2.2"
pipelines:
  - id: s3in
    connectors:
      - id: bucket
        type: source
        plugin: builtin:s3
        settings:
SETTINGS      - id: out
        type: destination
        plugin: builtin:file
        settings: {path: "{tmp}/out"}
"""

DESTINATION = """
version: "2.2"
pipelines:
  - id: s3out
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: COUNT, maxRecordsPerBatch: 10}}
      - id: bucket
        type: destination
        plugin: builtin:s3
        settings:
SETTINGS"""


def source_yaml(server: MotoS3, bucket: str, **extra: str) -> str:
    return SOURCE.replace("SETTINGS", server.settings(bucket, **extra))


def destination_yaml(server: MotoS3, bucket: str, count: int, **extra: str) -> str:
    settings = server.settings(bucket, format="json", **extra)
    return DESTINATION.replace("SETTINGS", settings).replace("COUNT", str(count))


def lines_in(server: MotoS3, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    """The records of a destination's data objects, in name (= delivery) order."""
    records = []
    for key in sorted(server.keys(bucket, prefix)):
        if not key.rsplit("/", 1)[-1].startswith("."):
            records += [json.loads(line) for line in server.body(bucket, key).decode().splitlines()]
    return records


def no_secret(payload: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The secret key appears nowhere: exit payload, state directory, logs (``capture_logs`` first)."""
    assert_not_shown([SECRET_KEY], [payload], [tmp_path / "state"], caplog)


def test_the_source_reads_a_snapshot_then_creates_updates_and_deletes(run_yaml, tmp_path, moto_s3, caplog):
    capture_logs(caplog)
    bucket = moto_s3.bucket(versioned=True)
    s3 = moto_s3.client()
    for name in ("a", "b", "c"):
        s3.put_object(
            Bucket=bucket, Key=f"in/{name}.txt", Body=f"{name}-1".encode(), ContentType="text/plain"
        )
    s3.put_object(Bucket=bucket, Key="other/x.txt", Body=b"outside the prefix")

    payload = run_yaml(source_yaml(moto_s3, bucket, prefix="in/", maxRecordsPerBatch="2"))
    assert payload["exit_code"] == 0, payload
    records = read_jsonl(tmp_path / "out")
    assert [(r["operation"], text(r["key"]), text(r["payload"]["after"])) for r in records] == [
        ("snapshot", "in/a.txt", "a-1"),
        ("snapshot", "in/b.txt", "b-1"),
        ("snapshot", "in/c.txt", "c-1"),
    ]
    assert all(r["metadata"]["s3.contentType"] == "text/plain" for r in records)
    assert all(r["position"] for r in records) and len({r["position"] for r in records}) == 3
    assert payload["batches"] == 2  # maxRecordsPerBatch: 2

    s3.put_object(Bucket=bucket, Key="in/b.txt", Body=b"b-2")
    s3.delete_object(Bucket=bucket, Key="in/c.txt")
    s3.put_object(Bucket=bucket, Key="in/d.txt", Body=b"d-1")
    payload = run_yaml(source_yaml(moto_s3, bucket, prefix="in/"))
    assert payload["exit_code"] == 0, payload
    changes = read_jsonl(tmp_path / "out")[3:]
    assert sorted((r["operation"], text(r["key"]), text(r["payload"]["after"])) for r in changes) == [
        ("create", "in/d.txt", "d-1"),
        ("delete", "in/c.txt", None),
        ("update", "in/b.txt", "b-2"),
    ]
    payload = run_yaml(source_yaml(moto_s3, bucket, prefix="in/"))  # nothing new: nothing read again
    assert payload["exit_code"] == 0 and payload["records"]["read"] == 0, payload
    assert len(read_jsonl(tmp_path / "out")) == 6
    no_secret(payload, tmp_path, caplog)


def test_the_source_reads_new_objects_of_a_bucket_without_versioning(run_yaml, tmp_path, moto_s3):
    bucket = moto_s3.bucket()
    s3 = moto_s3.client()
    s3.put_object(Bucket=bucket, Key="one", Body=b"1")
    assert run_yaml(source_yaml(moto_s3, bucket))["exit_code"] == 0
    s3.put_object(Bucket=bucket, Key="two", Body=b"2")
    assert run_yaml(source_yaml(moto_s3, bucket))["exit_code"] == 0
    records = read_jsonl(tmp_path / "out")
    assert [(r["operation"], text(r["key"])) for r in records] == [("snapshot", "one"), ("create", "two")]


def test_the_destination_writes_each_batch_once_even_when_replayed(
    run_yaml, tmp_path, moto_s3, monkeypatch, caplog
):
    capture_logs(caplog)
    bucket = moto_s3.bucket()
    # A second destination that fails once, after the S3 destination published its batch: the restart
    # replays that batch, which S3 must not write again.
    (tmp_path / "udf").mkdir()
    (tmp_path / "udf" / "s3_flaky.py").write_text(
        "import os\nfrom airflow_conduit.errors import TransientError\n"
        "def sink(records, delivery_hash):\n"
        "    if os.path.exists(os.environ['S3_FLAKY_FLAG']):\n"
        "        os.unlink(os.environ['S3_FLAKY_FLAG'])\n"
        "        raise TransientError('the sink is down')\n"
    )
    flag = tmp_path / "down"
    monkeypatch.setenv("S3_FLAKY_FLAG", str(flag))
    flaky = (
        "      - {id: sink, type: destination, plugin: custom.python, "
        'settings: {function: "s3_flaky:sink", path: "{tmp}/udf"}}\n'
    )
    payload = run_yaml(destination_yaml(moto_s3, bucket, 20, prefix="out") + flaky)
    assert payload["exit_code"] == 0, payload
    flag.touch()
    payload = run_yaml(destination_yaml(moto_s3, bucket, 30, prefix="out") + flaky)
    assert payload["exit_code"] == 75 and payload["error"]["node"] == "s3out:sink", payload
    payload = run_yaml(destination_yaml(moto_s3, bucket, 30, prefix="out") + flaky)
    assert payload["exit_code"] == 0, payload

    records = lines_in(moto_s3, bucket, "out/")
    assert [int(text(r["key"])) for r in records] == list(range(30))  # each record once, in order
    assert records[0]["operation"] == "create" and "payload" in records[0]
    objects = [k for k in moto_s3.keys(bucket, "out/") if not k.startswith("out/.")]
    assert len(objects) == 3  # one object per micro-batch
    marker = json.loads(moto_s3.body(bucket, "out/.conduit-delivery-s3out-bucket.json"))
    assert marker["batch"] == 2 and marker["hash"]
    no_secret(payload, tmp_path, caplog)


def test_the_destination_can_be_the_dlq(run_yaml, tmp_path, moto_s3):
    bucket = moto_s3.bucket()
    dlq = moto_s3.settings(bucket, format="json", prefix="dlq").replace("          ", "        ")
    yaml_text = (
        destination_yaml(moto_s3, bucket, 10, prefix="out")
        + "    processors:\n"
        + '      - {id: reject, plugin: error, condition: "CAST(.Key AS INT) IN (3, 7)", settings: {message: no}}\n'
        + "    dead-letter-queue:\n      plugin: builtin:s3\n      settings:\n"
        + dlq
        + "      window-size: 10\n      window-nack-threshold: 5\n"
    )
    payload = run_yaml(yaml_text)
    assert payload["exit_code"] == 0, payload
    assert [int(text(r["key"])) for r in lines_in(moto_s3, bucket, "out/")] == [0, 1, 2, 4, 5, 6, 8, 9]
    dead = lines_in(moto_s3, bucket, "dlq/")
    assert sorted(int(text(r["key"])) for r in dead) == [3, 7]
    assert all(r["metadata"]["conduit.dlq.nack.node.id"] == "s3out:reject" for r in dead)


def test_a_missing_bucket_is_fatal_and_says_which_setting(run_yaml, tmp_path, moto_s3, caplog):
    capture_logs(caplog)
    payload = run_yaml(source_yaml(moto_s3, "no-such-bucket"))
    assert payload["exit_code"] == 1, payload
    assert payload["error"]["kind"] == "fatal" and "aws.bucket" in payload["error"]["message"]
    payload = run_yaml(destination_yaml(moto_s3, "no-such-bucket", 5))
    assert payload["exit_code"] == 1, payload
    assert "aws.bucket" in payload["error"]["message"]
    no_secret(payload, tmp_path, caplog)


def test_an_unreachable_endpoint_is_transient(run_yaml, tmp_path, moto_s3, caplog):
    capture_logs(caplog)
    down = MotoS3()  # never started: nothing listens on its port
    payload = run_yaml(source_yaml(down, "any"))
    assert payload["exit_code"] == 75 and payload["error"]["code"] == "source_failed", payload
    assert "unreachable" in payload["error"]["message"]
    payload = run_yaml(destination_yaml(down, "any", 5))
    assert payload["exit_code"] == 75 and payload["error"]["code"] == "destination_failed", payload
    no_secret(payload, tmp_path, caplog)


def test_settings_are_checked_at_load(tmp_path):
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.config.errors import ConfigError

    bad = destination_yaml(MotoS3(port=1), "b", 5).replace('format: "json"', 'format: "parquet"')
    try:
        load_pipeline_text(bad, str(tmp_path / "p.yaml"))
    except ConfigError as error:
        message = str(error)
    else:
        raise AssertionError("format: parquet was accepted")
    assert "format" in message and "json" in message and SECRET_KEY not in message
