"""What a user times: ``airflow-conduit run --until-idle`` as a whole process against bare Spark jobs as
whole processes, on the same JSON lines, rounds alternating; and where the engine's run spends its time.

``benchmarks/throughput.py`` measures inside one warmed SparkSession. A user starts a process: the JVM,
the session, the plan checks, the streaming query and a cold first micro-batch are all on the clock. This
script runs, as separate processes, in turn:

- **bare**: the Spark job a user would write (read the lines with a schema, add a column, write JSON);
- **ceiling**: bare Spark writing the same OpenCDC lines as the pipeline, as one batch job;
- **pipeline**: ``airflow-conduit run`` of file -> json.decode -> field.set -> file.

It prints medians, the ratios pipeline/bare and pipeline/ceiling, and the pipeline's phases from its own
log and batch log: process start to ``starting`` (JVM, session, plan checks), ``starting`` to the first
micro-batch (query start), the batches (first and last), and the end (stop, summary, exit).

    .venv/bin/python benchmarks/whole_process.py [--records N] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from throughput import DATA_SCHEMA, PIPELINE, make_data

from airflow_conduit.engine.jvm import java_version

VENV_BIN = Path(sys.executable).parent
BARE_JOB = """\
import sys
from pyspark.sql import SparkSession, functions as F

source, target, opencdc = sys.argv[1], sys.argv[2], sys.argv[3] == "opencdc"
spark = SparkSession.builder.master("local[*]").appName("bare").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
frame = spark.read.schema({schema!r}).json(source)
if opencdc:
    envelope = (
        "to_json(named_struct('position', base64(cast(monotonically_increasing_id() as string)), "
        "'operation', 'create', 'metadata', map('opencdc.readAt', "
        "cast(unix_micros(current_timestamp()) * 1000 as string), 'conduit.source.connector.id', 'bare:in'), "
        "'key', cast(null as string), 'payload', named_struct('before', cast(null as string), 'after', "
        "named_struct('amount', amount, 'env', 'prod', 'id', id, 'kind', kind, 'sku', sku))), "
        "map('ignoreNullFields', 'false'))"
    )
    frame.selectExpr(envelope + " AS value").write.mode("overwrite").text(target)
else:
    frame.withColumn("env", F.lit("prod")).write.mode("overwrite").json(target)
spark.stop()
"""


@dataclass
class Phases:
    """Seconds of one pipeline run, from the process start."""

    to_starting: float
    query_start: float
    first_batch: float
    other_batches: float
    last_batch: float
    to_exit: float


def run_bare(work: Path, source: Path, kind: str) -> float:
    script = work / "bare_job.py"
    script.write_text(BARE_JOB.format(schema=DATA_SCHEMA))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(script), str(source), str(work / f"out-{kind}"), kind],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def _log_time(line: str) -> datetime:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").astimezone()


def run_pipeline(work: Path, source: Path) -> tuple[float, Phases]:
    target, state = work / "out-pipeline", work / "state"
    for path in (target, state):
        shutil.rmtree(path, ignore_errors=True)
    pipeline = work / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(id="whole", source=source, target=target, extra=""))
    launched = datetime.now().astimezone()
    started = time.perf_counter()
    done = subprocess.run(
        [str(VENV_BIN / "airflow-conduit"), "run", str(pipeline), "--until-idle", "--state-dir", str(state)],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"the pipeline failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    starting = next(_log_time(line) for line in done.stderr.splitlines() if ": starting (" in line)
    batches = [json.loads(line) for line in (state / "whole" / "batches.jsonl").read_text().splitlines()]
    first_start = datetime.fromisoformat(batches[0]["started_at"])
    last_end = datetime.fromisoformat(batches[-1]["ended_at"])
    seconds = [float(b["seconds"]) for b in batches]
    phases = Phases(
        to_starting=(starting - launched).total_seconds(),
        query_start=(first_start - starting).total_seconds(),
        first_batch=seconds[0],
        other_batches=sum(seconds[1:]),
        last_batch=seconds[-1],
        to_exit=elapsed - (last_end - launched).total_seconds(),
    )
    return elapsed, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--java-home", help="the Java every job runs on (default: JAVA_HOME, else PATH's)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.java_home:
        os.environ["JAVA_HOME"] = args.java_home
    version = java_version()

    work = Path(tempfile.mkdtemp(prefix="conduit-whole-"))
    source = work / "in"
    source.mkdir()
    size = make_data(source / "data.jsonl", args.records)
    print(
        f"{args.records:,} JSON lines, {size / 1e6:.0f} MB; {args.repeat} alternating rounds, whole processes; "
        f"Java {'.'.join(map(str, version)) if version else 'unknown'}"
    )
    times: dict[str, list[float]] = {"bare": [], "ceiling": [], "pipeline": []}
    phases: list[Phases] = []
    for _ in range(args.repeat):
        times["bare"].append(run_bare(work, source, "plain"))
        times["ceiling"].append(run_bare(work, source, "opencdc"))
        elapsed, run_phases = run_pipeline(work, source)
        times["pipeline"].append(elapsed)
        phases.append(run_phases)
    median = {kind: statistics.median(values) for kind, values in times.items()}
    for kind, label in (
        ("bare", "bare Spark job (read JSON, add a column, write JSON)"),
        ("ceiling", "bare Spark job writing the OpenCDC lines"),
        ("pipeline", "airflow-conduit run --until-idle"),
    ):
        rate = args.records / median[kind]
        print(f"{label:<52} {median[kind]:6.1f} s  {rate:>9,.0f} records/s")
    print(
        f"pipeline / bare: {median['bare'] / median['pipeline']:.2f}x (goal >= 0.8x); "
        f"pipeline / ceiling: {median['ceiling'] / median['pipeline']:.2f}x"
    )
    print("the pipeline's run, seconds (median of the rounds):")
    for name in Phases.__dataclass_fields__:
        value = statistics.median(getattr(p, name) for p in phases)
        print(f"  {name:<14} {value:6.1f}")
    print("rounds:", {kind: [round(v, 1) for v in values] for kind, values in times.items()})
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
