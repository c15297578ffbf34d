"""Hadoop's local file system without its shell commands where the engine can avoid them.

Without Hadoop's native library, each `readlink` (one per FileContext rename) and `chmod` is a process
the driver starts, 4-5 ms each (``engine/jvm.py``, ``engine/local_files.py``). The JVM's flight recorder
lists every process the driver starts while a pipeline runs."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from airflow_conduit.engine import local_files

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
    # Before engine/local_files.py: a chmod per file and directory Hadoop created, eleven a batch. (A
    # context's first task also fetches the engine's jars, with `chmod a+x`: no file of the run.)
    assert [c for c in commands if str(tmp_path) in c] == []
    # Before: a readlink for each side of every rename of an offset or commit log entry, 12 a batch.
    assert [c for c in commands if c.startswith("readlink")] == []
    # Before: two chmods a batch, for _SUCCESS and its checksum.
    assert [c for c in commands if "_SUCCESS" in c] == []


def _local_files(spark) -> tuple[Any, Any]:
    """The context's ``file:`` file system, and the JVM."""
    jvm = spark._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI.create("file:///"), conf), jvm


def test_a_local_session_uses_local_files_and_a_second_call_changes_nothing(spark):
    filesystem, _ = _local_files(spark)
    assert filesystem.getClass().getName() == local_files.CLASS_NAME
    assert local_files.use_local_files(spark)
    assert _local_files(spark)[0].equals(filesystem)  # the cached one kept


def test_a_write_of_local_files_gives_hadoops_modes_and_reads_back(spark, tmp_path):
    out = tmp_path / "out"
    frame = spark.range(100).selectExpr("CAST(id AS STRING) AS value").repartition(2)
    _, commands = started_processes(spark, lambda: frame.write.text(str(out)), tmp_path / "write.jfr")

    assert [c for c in commands if str(out) in c] == []
    written = sorted(out.iterdir())
    assert sum(len(p.read_text().splitlines()) for p in written if p.suffix == ".txt") == 100
    # What Hadoop's own chmod gave: its default modes under its default umask (022).
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o644}
    assert spark.sparkContext.textFile(str(out)).count() == 100  # checksummed files read back


@pytest.mark.parametrize(("mode", "expected"), [("640", 0o640), ("1777", 0o1777), ("000", 0)])
def test_set_permission_gives_the_mode_asked_for(spark, tmp_path, mode, expected):
    """rwx bits through java.nio; a sticky bit through Hadoop's own ``chmod``."""
    filesystem, jvm = _local_files(spark)
    target = tmp_path / "target"
    target.mkdir()
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    filesystem.setPermission(jvm.org.apache.hadoop.fs.Path(str(target)), permission)
    assert stat.S_IMODE(target.stat().st_mode) == expected


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[4, 3]", True),
        ("local-cluster[2, 1, 1024]", False),
        ("spark://127.0.0.1:7077", False),
        ("yarn", False),
    ],
)
def test_only_a_local_master_whose_executors_are_the_driver(master, local):
    assert bool(local_files._LOCAL_MASTER.fullmatch(master)) is local
