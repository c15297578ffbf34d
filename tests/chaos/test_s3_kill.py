"""SIGKILL of an engine writing to ``builtin:s3`` (moto, tests/servers/moto_s3.py), three times at
random moments inside batches: after the restarts every record is in the bucket exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import text
from tests.integration.test_cli import CLI, cli, wait_for
from tests.servers.moto_s3 import MotoS3, moto_s3

__all__ = ["moto_s3"]  # the fixture, used by name

pytestmark = pytest.mark.chaos

COUNT = 3000
PIPELINE = """\
version: "2.2"
pipelines:
  - id: s3kill
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: ${COUNT}
          rate: ${RATE}
          maxRecordsPerBatch: 150
      - id: bucket
        type: destination
        plugin: builtin:s3
        settings:
SETTINGS"""


def commits(state: Path, pipeline: str) -> list[int]:
    directory = state / pipeline / "checkpoint" / "commits"
    return sorted(int(p.name) for p in directory.glob("[0-9]*")) if directory.is_dir() else []


def bucket_records(server: MotoS3, bucket: str) -> list[dict]:
    records = []
    for key in sorted(server.keys(bucket, "out/")):
        if not key.startswith("out/."):
            records += [json.loads(line) for line in server.body(bucket, key).decode().splitlines()]
    return records


# Worst case: 3 x (180 s for a commit + 30 s for the exit) + the 600 s final run, about 1240 s.
@pytest.mark.timeout(1800)
def test_sigkill_three_times_then_every_record_is_in_the_bucket_once(moto_s3, tmp_path):
    bucket = moto_s3.bucket()
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE.replace("SETTINGS", moto_s3.settings(bucket, format="json", prefix="out")))
    state = tmp_path / "state"
    rng = random.Random()
    for kill in range(3):
        process = subprocess.Popen(
            [*CLI, "run", str(pipeline), "--state-dir", str(state)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "COUNT": str(COUNT), "RATE": "300"},
            start_new_session=True,
        )
        try:
            before = len(commits(state, "s3kill"))
            wait_for(lambda b=before: len(commits(state, "s3kill")) > b, 180, f"a commit before kill {kill}")
            time.sleep(rng.uniform(0.0, 1.5))  # somewhere inside a later batch
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    result = cli(
        "run",
        str(pipeline),
        "--until-idle",
        "--state-dir",
        str(state),
        env={"COUNT": str(COUNT), "RATE": "0"},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    keys = [int(text(r["key"])) for r in bucket_records(moto_s3, bucket)]
    assert sorted(set(keys)) == list(range(COUNT))  # nothing lost
    assert len(keys) == COUNT  # nothing twice: a replayed batch found its marker, or overwrote its object
    # Object names sort by generation and zero-padded batch id, lines keep source order: replays included.
    assert keys == list(range(COUNT))
