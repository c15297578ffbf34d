"""A JVM class-data archive for the Spark driver the engine starts itself: a faster start of every run.

A fresh ``airflow-conduit run`` spends seconds loading and verifying Spark's classes before it reads a
record. The JVM can keep those classes, parsed and verified, in a class-data sharing (CDS) archive and
map it at the next start. Measured on the whole-process benchmark (1M lines, 2 cores, two runs of 3
alternating rounds): process start to ``starting`` 5.9 and 5.4 s without, 4.3 and 3.3 s with it; the
whole run 26.2 and 22.7 s against 24.3 and 21.7 s.

On Java 25 and later the archive is an AOT cache instead (JEP 483, 514, 515): the classes linked as well,
and the methods' profiles from the recording run, so the JIT compiles the hot paths of the first
micro-batch sooner (:func:`~airflow_conduit.engine.jvm.uses_aot_cache`).

The archive belongs to one JVM and one set of Spark jars: its file name carries a digest of both
(:func:`~airflow_conduit.engine.jvm.archive_path`), so after an upgrade the engine looks for a new one
and starts without one until it is built. Built by::

    python -m airflow_conduit.engine.class_archive

(``make venv`` does it), which runs a small pipeline in a JVM that writes the archive at its exit
(:func:`~airflow_conduit.engine.jvm.record_options`). Where the archive lives and the options that map
it are in :mod:`.jvm` (:func:`~airflow_conduit.engine.jvm.archive_options`), which the session reads
before Spark starts. A JVM that cannot use the archive starts as it would without it, and says nothing.

Beside each archive a small JSON file names the ``java`` and the jars directory it was built for; a
build removes the archives whose inputs have since changed or gone (a reinstalled pyspark, a deleted
virtualenv), which would otherwise stay in the cache at 160-180 MB each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from airflow_conduit.engine.jvm import ARCHIVE_ENV, archive_file, archive_inputs, cache_dir, record_options
from airflow_conduit.files import write_atomic

_SAMPLE_LINES = 2_000
BUILD_TIMEOUT = 600.0
"""Seconds the sample run may take (about 25 on 2 cores, 30 for an AOT cache) before the build gives up."""


def _record_classes(target: Path) -> None:
    """In a child process: run a small file -> json.decode -> field.set -> file pipeline in a new JVM
    that writes the archive (the classes it loaded; on Java 25+ also their profiles) to ``target`` when
    it exits."""
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import RunOptions
    from airflow_conduit.engine.runner import run_pipeline
    from airflow_conduit.engine.session import driver_java_options, get_session

    work = Path(tempfile.mkdtemp(prefix="conduit-classes-"))
    try:
        source = work / "in"
        source.mkdir()
        with (source / "lines.jsonl").open("w") as lines:
            for number in range(_SAMPLE_LINES):
                lines.write(json.dumps({"id": number, "kind": "order", "amount": number / 4}) + "\n")
        pipeline = load_pipeline_text(
            f"""
version: "2.2"
pipelines:
  - id: classes
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{source}"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{work / "out"}"}}}}
    processors:
      - {{id: decode, plugin: json.decode, settings: {{field: .Payload.After}}}}
      - {{id: tag, plugin: field.set, settings: {{field: .Payload.After.env, value: prod}}}}
""",
            "<class archive>",
        ).pipelines[0]
        options = f"{driver_java_options(class_archive=False)} {record_options(target)}"
        spark = get_session(java_options=options)
        payload = run_pipeline(spark, pipeline, work / "state", RunOptions(until_idle=True))
        if payload["exit_code"] != 0:
            raise SystemExit(f"the sample pipeline failed: {payload['error']}")
        spark.stop()
        # The JVM writes the archive as it exits, which it does when its standard input closes.
        gateway = spark.sparkContext._gateway
        process = getattr(gateway, "proc", None)
        if process is not None:
            process.stdin.close()
            process.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build() -> Path:
    """Build the archive for this JVM and these Spark jars into the cache; returns its path."""
    inputs = archive_inputs()
    if inputs is None:
        raise SystemExit("no java (JAVA_HOME or PATH) or no pyspark jars: nothing to build an archive for")
    java, jars = inputs
    path = archive_file(java, jars)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    env = {**os.environ, ARCHIVE_ENV: "off"}
    # Its output stays out of sight unless it fails: Java 25's JVM that assembles an AOT cache prints
    # its whole class path.
    recorded = subprocess.run(
        [sys.executable, "-m", "airflow_conduit.engine.class_archive", "--record", str(partial)],
        env=env,
        timeout=BUILD_TIMEOUT,
        capture_output=True,
        text=True,
    )
    if recorded.returncode != 0:
        partial.unlink(missing_ok=True)
        raise SystemExit(f"the sample run that records the archive failed:\n{recorded.stderr[-3000:]}")
    if not partial.is_file():
        raise SystemExit(f"the JVM wrote no archive to {partial}")
    os.replace(partial, path)  # a run starting meanwhile maps the old file or none, never half of one
    write_atomic(_inputs_record(path), json.dumps({"java": str(java), "jars": str(jars)}) + "\n")
    return path


def _inputs_record(archive: Path) -> Path:
    """The file beside an archive that names the JVM and the jars it was built for."""
    return archive.with_suffix(".json")


def _is_stale(archive: Path) -> bool:
    """Whether ``archive``'s JVM or jars are gone or changed since it was built (its name would differ
    now); an archive without a record of its inputs (built before they were recorded) is kept."""
    try:
        recorded = json.loads(_inputs_record(archive).read_text())
        java, jars = Path(recorded["java"]), Path(recorded["jars"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not java.is_file() or not jars.is_dir():
        return True
    try:
        return archive_file(java, jars) != archive
    except OSError:  # a jar removed while we looked
        return True


def prune_stale_archives(keep: Path | None = None) -> list[Path]:
    """Remove the cached archives whose JVM or Spark jars were upgraded or removed since they were built
    (each reinstall of pyspark, each deleted virtualenv, left 160-180 MB behind); returns the removed.
    Archives of other JVMs or other virtualenvs that are still there stay."""
    removed = []
    for archive in sorted(cache_dir().glob("spark-driver-*")):
        if archive.suffix not in (".jsa", ".aot") or archive == keep or not _is_stale(archive):
            continue
        archive.unlink(missing_ok=True)
        _inputs_record(archive).unlink(missing_ok=True)
        removed.append(archive)
    return removed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_conduit.engine.class_archive",
        description=(
            "Build the JVM class-data archive (on Java 25+, an AOT cache) that makes the Spark driver of "
            "`airflow-conduit run` start faster (about 1.5 s of each run on 2 cores). Runs a small pipeline "
            "once (about 25 s) and "
            f"writes the archive under {cache_dir()}. Run it again after upgrading Java or pyspark; set "
            f"{ARCHIVE_ENV}=off to start without it."
        ),
    )
    parser.add_argument("--record", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record:
        _record_classes(Path(args.record))
        return
    path = build()
    print(f"class archive written: {path}")
    for stale in prune_stale_archives(keep=path):
        print(f"removed a stale class archive (its Java or Spark jars changed or are gone): {stale}")


if __name__ == "__main__":
    main()
