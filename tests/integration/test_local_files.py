"""Hadoop's local file system without its shell commands where the engine can avoid them.

Without Hadoop's native library, each `readlink` (one per FileContext rename) and `chmod` is a process
the driver starts, 4-5 ms each (``engine/jvm.py``). The JVM's flight recorder lists every process the
driver starts while a pipeline runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

pytestmark = pytest.mark.spark

PIPELINE = """
version: "2.2"
pipelines:
  - id: spawns
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 30, maxRecordsPerBatch: 10}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out"}}
"""


def started_processes(spark, run: Callable[[], T], dump: Path) -> tuple[T, list[str]]:
    """What ``run()`` returned, and the command line of every process the JVM started meanwhile."""
    jvm = spark._jvm
    recording = jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    try:
        result = run()
    finally:
        recording.stop()
    dump_path = jvm.java.io.File(str(dump)).toPath()
    recording.dump(dump_path)
    recording.close()
    events = jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(dump_path)
    return result, [str(event.getString("command")) for event in events]


def test_the_checkpoint_logs_and_staged_writes_start_no_readlink_and_no_success_file(
    spark, run_yaml, tmp_path
):
    payload, commands = started_processes(spark, lambda: run_yaml(PIPELINE), tmp_path / "spawns.jfr")
    assert payload["exit_code"] == 0 and payload["batches"] >= 3, payload
    # The recording sees the processes Hadoop still starts: a chmod per file and directory it creates.
    assert any(c.startswith("chmod") and f"{tmp_path}/out/" in c for c in commands), commands
    # Before: a readlink for each side of every rename of an offset or commit log entry, 12 a batch.
    assert [c for c in commands if c.startswith("readlink")] == []
    # Before: two chmods a batch, for _SUCCESS and its checksum.
    assert [c for c in commands if "_SUCCESS" in c] == []
