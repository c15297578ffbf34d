"""The S3 server stopped mid-run: the engine exits 75 (transient); once it is back, the next run
completes and nothing is lost, for the ``builtin:s3`` source and destination alike."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.chaos.test_s3_kill import bucket_records, commits
from tests.conftest import read_jsonl, text
from tests.integration.test_cli import CLI, cli, wait_for
from tests.servers.moto_s3 import MotoS3, moto_s3

__all__ = ["moto_s3"]  # the fixture, used by name

pytestmark = pytest.mark.chaos

TO_S3 = """\
version: "2.2"
pipelines:
  - id: s3down
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: 2000
          rate: ${RATE}
          maxRecordsPerBatch: 100
      - id: bucket
        type: destination
        plugin: builtin:s3
        settings:
SETTINGS"""

FROM_S3 = """\
version: "2.2"
pipelines:
  - id: s3down
    connectors:
      - id: bucket
        type: source
        plugin: builtin:s3
        settings:
SETTINGS      - id: out
        type: destination
        plugin: builtin:file
        settings: {path: "OUT"}
"""


def run_through_outage(server: MotoS3, pipeline: Path, state: Path, env: dict[str, str]) -> dict:
    """Run until a batch committed, stop the server, expect exit 75; start it again."""
    process = subprocess.Popen(
        [*CLI, "run", str(pipeline), "--state-dir", str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
    )
    try:
        wait_for(lambda: len(commits(state, "s3down")) >= 1, 180, "a committed batch")
        server.stop()
        out, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
        server.start()
    assert process.returncode == 75, out[-2000:]
    payload = json.loads((state / "s3down" / "exit.json").read_text())
    assert payload["error"]["kind"] == "transient" and "unreachable" in payload["error"]["message"], payload
    return payload


# Each test: 180 s for a commit + 180 s for the exit + the 600 s final run, about 960 s at worst.
@pytest.mark.timeout(1200)
def test_destination_outage_exits_75_and_the_next_run_loses_nothing(moto_s3, tmp_path):
    bucket = moto_s3.bucket()
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(TO_S3.replace("SETTINGS", moto_s3.settings(bucket, format="json", prefix="out")))
    state = tmp_path / "state"
    payload = run_through_outage(moto_s3, pipeline, state, {"RATE": "200"})
    assert payload["error"]["code"] == "destination_failed"
    result = cli(
        "run", str(pipeline), "--until-idle", "--state-dir", str(state), env={"RATE": "0"}, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    keys = [int(text(r["key"])) for r in bucket_records(moto_s3, bucket)]
    assert sorted(keys) == list(range(2000))  # every record, once


@pytest.mark.timeout(1200)
def test_source_outage_exits_75_and_the_next_run_loses_nothing(moto_s3, tmp_path):
    bucket = moto_s3.bucket(versioned=True)
    s3 = moto_s3.client()
    for i in range(300):
        s3.put_object(Bucket=bucket, Key=f"obj-{i:04d}", Body=str(i).encode())
    pipeline = tmp_path / "pipeline.yaml"
    settings = moto_s3.settings(bucket, maxRecordsPerBatch="10")
    pipeline.write_text(FROM_S3.replace("SETTINGS", settings).replace("OUT", str(tmp_path / "out")))
    state = tmp_path / "state"
    payload = run_through_outage(moto_s3, pipeline, state, {})
    assert payload["error"]["code"] == "source_failed"
    result = cli("run", str(pipeline), "--until-idle", "--state-dir", str(state), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    keys = [text(r["key"]) for r in read_jsonl(tmp_path / "out")]
    assert sorted(keys) == [f"obj-{i:04d}" for i in range(300)]  # every object, once
