"""End-to-end latency of two continuous pipelines at a steady 1,000 records/s, against the goals.

The goals: p50 at most 0.5 s and p99 at most 1 s from a record's write to its published file. Both
pipelines run continuously (``PipelineRun``, ``RunOptions()``: the engine's default trigger, unless
``--trigger`` names others) in one local[2] SparkSession in this process, one after the other:

1. **file -> file**: ``builtin:file`` reading a directory with one file, to which a writer thread appends
   ``--rate`` JSON lines/s (every 10 ms the lines that are due, flushed), each ``{"id", "phase", "ts"}``
   with ``ts`` the ``time.time()`` of its append; ``json.decode`` of ``.Payload.After``; ``builtin:file``
   destination directory.
2. **Postgres CDC -> file**: ``builtin:postgres`` (``logrepl``, ``test_decoding``) on a throwaway cluster
   (tests/pgcluster.py) to the same destination, rows inserted at ``--rate`` rows/s with
   ``clock_timestamp()``: the latency part of benchmarks/postgres_cdc.py (its pipeline, writer and
   watcher), with the source's default ``pollingPeriod``.

A watcher thread lists the destination every 20 ms and notes when each published ``*.jsonl`` file
appeared; a record's latency is that moment minus its write time (``payload.after.ts``). The first
``--warmup`` seconds of records of each run are written and checked but left out of the figures, and an
unmeasured file -> file run of ``--session-warmup`` seconds comes first (without it, the first run in the
fresh JVM came out slower). Every record written must be in the destination exactly once (checked by id;
a wrong count is an error). Timings are printed, never asserted.

Each record's latency is also split by the micro-batch that carried it (the batch id is in the file's
name), into the legs of LEGS: from its write to the batch's trigger (Spark's progress ``timestamp``),
Spark's work before ``foreachBatch`` (offsets, the offset log, planning), the engine's batch (the batch
log's ``started_at``) until its Spark job is submitted, the job (the Spark UI's REST API), and from the
job's end to the file seen. Per batch: the engine's seconds (the batch log), the destination's share
(``on_batch``, the run's counters) and Spark's durations (``recentProgress``).

    nice -n 10 .venv/bin/python benchmarks/latency.py [--seconds S] [--warmup W] [--rate R]
        [--trigger "500 milliseconds,100 milliseconds"] [--only file,postgres] [--polling-period P]
        [--session-warmup S]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import postgres_cdc as cdc  # sets sys.path (tests/ for pgcluster) and the Spark environment
import psycopg

from airflow_conduit.batch_log import BatchEntry, read_batches
from airflow_conduit.config import load_pipeline_text
from airflow_conduit.config.settings import PostgresSourceSettings
from airflow_conduit.engine.job import DEFAULT_TRIGGER_INTERVAL, PipelineRun, RunOptions
from airflow_conduit.engine.session import get_session
from airflow_conduit.state import PipelineState, parse_time

GOAL_P50 = 0.5
GOAL_P99 = 1.0
APPEND_EVERY = 0.01
"""The file writer appends the lines that are due this often."""
DEFAULT_POLLING = float(PostgresSourceSettings.model_fields["poll_interval"].default)

FILE_PIPELINE = """
version: "2.2"
pipelines:
  - id: {id}
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{source}"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{target}"}}}}
    processors:
      - {{id: decode, plugin: json.decode, settings: {{field: .Payload.After}}}}
"""


# the records ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """One record in a published file."""

    key: int
    phase: int
    """0: the record that shows the pipeline is up; 1: warm-up; 2: measured."""
    written: float
    appeared: float
    batch: int


def arrivals(directory: Path, seen: dict[str, float]) -> list[Arrival]:
    """Every record of the published files ``seen`` (name -> when it appeared), from its OpenCDC line."""
    found = []
    for name, when in seen.items():
        batch = int(name.rsplit("-", 2)[-2])  # GENERATION-BATCH-PART.jsonl
        for line in (directory / name).read_text().splitlines():
            after = json.loads(line)["payload"]["after"]
            found.append(Arrival(int(after["id"]), int(after["phase"]), float(after["ts"]), when, batch))
    return found


def check_exactly_once(label: str, found: list[Arrival], expected: set[int]) -> None:
    """Every key of ``expected`` once, and nothing else: a wrong count is an error, not a result."""
    counts = Counter(a.key for a in found)
    duplicated = sorted(k for k, n in counts.items() if n > 1)
    missing = sorted(expected - counts.keys())
    unexpected = sorted(counts.keys() - expected)
    if duplicated or missing or unexpected:
        raise RuntimeError(
            f"{label}: {len(found)} records in the destination for {len(expected)} written: "
            f"{len(duplicated)} keys more than once {duplicated[:5]}, {len(missing)} missing {missing[:5]}, "
            f"{len(unexpected)} never written {unexpected[:5]}"
        )


def append_lines(
    path: Path, rate: float, phases: list[tuple[int, float]], first_key: int, halt: threading.Event
) -> list[cdc.Written]:
    """``rate`` lines/s appended to ``path`` for each ``(phase, seconds)`` in turn, without a pause
    between phases: every APPEND_EVERY the lines that are due, in one flushed write, each with the time
    of that write. One :class:`postgres_cdc.Written` per phase (``transactions``: appends)."""
    bounds, total = [], 0
    for phase, seconds in phases:
        total += int(rate * seconds)
        bounds.append((phase, total))
    rows = {phase: 0 for phase, _ in phases}
    appends = dict.fromkeys(rows, 0)
    ended = dict.fromkeys(rows, 0.0)
    written = ticks = 0
    with path.open("a", encoding="utf-8") as fh:
        start = time.monotonic()
        while written < total and not halt.is_set():
            ticks += 1
            time.sleep(max(0.0, start + ticks * APPEND_EVERY - time.monotonic()))
            due = min(total, int((time.monotonic() - start) * rate))
            if due <= written:
                continue
            now = time.time()
            lines, touched = [], set()
            for i in range(written, due):
                phase = next(p for p, bound in bounds if i < bound)
                touched.add(phase)
                rows[phase] += 1
                lines.append(json.dumps({"id": first_key + i, "phase": phase, "ts": now}) + "\n")
            fh.write("".join(lines))
            fh.flush()
            for phase in touched:
                appends[phase] += 1
                ended[phase] = time.monotonic()
            written = due
    result, previous = [], start
    for phase, _ in phases:
        result.append(cdc.Written(rows[phase], appends[phase], max(1e-9, ended[phase] - previous)))
        previous = ended[phase] or previous
    return result


# one measured run ----------------------------------------------------------------------------------


class DestinationSeconds:
    """The engine's ``on_batch`` callback: each batch's seconds in its destinations (staging, which runs
    the batch's Spark job, and the publish), from the run's counters."""

    def __init__(self) -> None:
        self.by_batch: dict[int, float] = {}

    def __call__(self, run: PipelineRun, result: Any) -> None:
        self.by_batch[result.batch_id] = sum(run.counters.last_destination_seconds.values())


LEGS = (
    ("wait", "write -> its batch's trigger starts"),
    ("spark", "trigger start -> the engine's batch starts (Spark: offsets, offset log, plan)"),
    ("engine", "the engine's batch start -> its Spark job is submitted"),
    ("job", "the batch's Spark job (read, records, processors, staged files)"),
    ("publish", "job end -> the file seen (staging's rest, publish, watcher)"),
)
"""The legs of a record's latency, in order; they add up to it."""


@dataclass
class Result:
    pipeline: str
    trigger: str
    written: cdc.Written
    warm_up: int
    latencies: list[float]
    legs: dict[str, list[float]]
    """Per record, the seconds of each of LEGS (records whose batch Spark and the engine reported)."""
    batches: list[BatchEntry]
    destination_seconds: list[float]
    """Per measured batch: the engine's seconds in the destination (``on_batch``)."""
    job_seconds: list[float]
    """Per measured batch: its Spark jobs, from the first submission to the last completion."""
    progress: list[dict[str, Any]]
    periods: list[float]
    """Seconds between the starts of consecutive measured triggers."""
    after_publish: list[float]
    """Per measured batch: from its first file seen to the engine's end of the batch (the batch log)."""
    load: tuple[tuple[float, ...], tuple[float, ...]]


def drive(
    label: str,
    run: PipelineRun,
    watcher: cdc.FileWatcher,
    progress: cdc.Progress,
    warm_up: Callable[[], None],
    write: Callable[[threading.Event], list[cdc.Written]],
) -> list[cdc.Written]:
    """One record to see the pipeline up, then ``write`` in a thread until it returns, then until the
    destination holds every record; Spark's progress collected meanwhile."""
    warm_up()
    cdc.wait_for(watcher.count, 1, run, f"{label}: first record")
    halt = threading.Event()
    box: list[list[cdc.Written]] = []
    writer = threading.Thread(target=lambda: box.append(write(halt)), name="writer", daemon=True)
    writer.start()
    try:
        while writer.is_alive():
            writer.join(1)
            progress.collect(run)
            if run.query is None or not run.query.isActive:
                raise RuntimeError(f"{label}: the pipeline stopped: {run.query and run.query.exception()}")
    finally:
        halt.set()
    if not box:
        raise RuntimeError(f"{label}: the writer failed")
    expected = 1 + sum(w.rows for w in box[0])
    cdc.wait_for(watcher.count, expected, run, label, tick=lambda: progress.collect(run))
    progress.settle(run, expected)
    if watcher.count() != expected:
        raise RuntimeError(f"{label}: the destination holds {watcher.count()} records, {expected} written")
    return box[0]


def to_seconds(stamp: str) -> float:
    """Seconds since the epoch of a Spark or engine timestamp (ISO-8601 UTC, ``Z`` or ``GMT``)."""
    return parse_time(stamp.removesuffix("GMT") + "Z" if stamp.endswith("GMT") else stamp).timestamp()


def spark_jobs(spark: Any, run_id: str) -> dict[int, tuple[float, float]]:
    """Per batch of the query run ``run_id``: its Spark jobs' first submission and last completion,
    from the Spark UI's REST API (empty when the UI is off or does not answer)."""
    url = spark.sparkContext.uiWebUrl
    if not url:
        return {}
    address = f"{url}/api/v1/applications/{spark.sparkContext.applicationId}/jobs"
    try:
        with urllib.request.urlopen(address, timeout=10) as response:
            jobs = json.load(response)
    except OSError:
        return {}
    spans: dict[int, tuple[float, float]] = {}
    for job in jobs:
        match = re.search(r"^batch = (\d+)$", job.get("description") or "", re.MULTILINE)
        if job.get("jobGroup") != run_id or match is None or "completionTime" not in job:
            continue
        start, end = to_seconds(job["submissionTime"]), to_seconds(job["completionTime"])
        batch = int(match.group(1))
        if batch in spans:
            start, end = min(start, spans[batch][0]), max(end, spans[batch][1])
        spans[batch] = (start, end)
    return spans


def result_of(
    pipeline: str,
    trigger: str,
    run: PipelineRun,
    found: list[Arrival],
    written: list[cdc.Written],
    progress: cdc.Progress,
    destination: DestinationSeconds,
    load: tuple[tuple[float, ...], tuple[float, ...]],
) -> Result:
    measured = [a for a in found if a.phase == 2]
    ids = sorted({a.batch for a in measured})
    spark = {i: progress.batches[i] for i in ids if i in progress.batches}
    engine = {e.batch: e for e in read_batches(run.state) if e.batch in set(ids)}
    jobs = spark_jobs(run.spark, str(run.query.runId)) if run.query is not None else {}
    legs: dict[str, list[float]] = {key: [] for key, _ in LEGS}
    for a in measured:
        if a.batch in spark and a.batch in engine and a.batch in jobs:
            trigger_at = to_seconds(spark[a.batch]["started"])
            engine_at = to_seconds(engine[a.batch].started_at)
            job_at, job_end = jobs[a.batch]
            legs["wait"].append(trigger_at - a.written)
            legs["spark"].append(engine_at - trigger_at)
            legs["engine"].append(job_at - engine_at)
            legs["job"].append(job_end - job_at)
            legs["publish"].append(a.appeared - job_end)
    starts = [to_seconds(spark[i]["started"]) for i in sorted(spark)]
    first_seen: dict[int, float] = {}
    for a in measured:
        first_seen[a.batch] = min(first_seen.get(a.batch, a.appeared), a.appeared)
    return Result(
        pipeline,
        trigger,
        written[-1],
        sum(w.rows for w in written[:-1]),
        [a.appeared - a.written for a in measured],
        legs,
        [engine[i] for i in ids if i in engine],
        [destination.by_batch[i] for i in ids if i in destination.by_batch],
        [jobs[i][1] - jobs[i][0] for i in ids if i in jobs],
        [spark[i] for i in sorted(spark)],
        [b - a for a, b in zip(starts, starts[1:], strict=False)],
        [to_seconds(engine[i].ended_at) - first_seen[i] for i in ids if i in engine],
        load,
    )


def file_to_file(spark: Any, workdir: Path, name: str, trigger: str, args: argparse.Namespace) -> Result:
    source, target = workdir / f"in-{name}", workdir / f"out-{name}"
    source.mkdir()
    data = source / "lines.jsonl"
    data.write_text(json.dumps({"id": 0, "phase": 0, "ts": 0.0}) + "\n")  # the first record
    text = FILE_PIPELINE.format(id=name, source=source, target=target)
    config = load_pipeline_text(text, str(workdir / f"{name}.yaml")).pipelines[0]
    state = PipelineState(workdir / "state", config.id)
    options = RunOptions() if trigger == DEFAULT_TRIGGER_INTERVAL else RunOptions(trigger_interval=trigger)
    watcher, progress, destination = cdc.FileWatcher(target), cdc.Progress(), DestinationSeconds()
    load_before = os.getloadavg()
    watcher.start()
    run = PipelineRun(spark, config, state, options, on_batch=destination).start()
    try:
        written = drive(
            f"file -> file, trigger {trigger!r}",
            run,
            watcher,
            progress,
            lambda: None,
            lambda halt: append_lines(data, args.rate, [(1, args.warmup), (2, args.seconds)], 1, halt),
        )
    finally:
        run.request_stop()
        payload = run.wait()
        watcher.stop()
    if payload["exit_code"] != 0:
        raise RuntimeError(f"{name} ended with {json.dumps(payload['error'])}")
    found = arrivals(target, watcher.seen)
    check_exactly_once(name, found, set(range(1 + sum(w.rows for w in written))))
    return result_of(
        "file -> file", trigger, run, found, written, progress, destination, (load_before, os.getloadavg())
    )


def postgres_to_file(setup: cdc.Setup, name: str, args: argparse.Namespace) -> Result:
    table = name.replace("-", "_")
    setup.cluster.execute(cdc.LATENCY_DDL.format(name=table), cdc.DATABASE)
    setup.cluster.execute(f"ALTER TABLE {table} OWNER TO {cdc.APP_USER}", cdc.DATABASE)
    setup.cluster.execute(f"ALTER SEQUENCE {table}_id_seq OWNER TO {cdc.APP_USER}", cdc.DATABASE)
    target = setup.workdir / f"out-{name}"
    watcher, progress, destination = cdc.FileWatcher(target), cdc.Progress(), DestinationSeconds()

    def first_row() -> None:
        with psycopg.connect(setup.url, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} (phase) VALUES (0)")

    def write(halt: threading.Event) -> list[cdc.Written]:
        warm = cdc.paced_writer(setup.url, table, 1, args.rate, args.warmup, halt)
        return [warm, cdc.paced_writer(setup.url, table, 2, args.rate, args.seconds, halt)]

    load_before = os.getloadavg()
    watcher.start()
    try:
        with cdc.pipeline(
            setup, name, table, cdc.FILE_DESTINATION.format(path=target), on_batch=destination
        ) as run:
            written = drive(
                f"postgres -> file, trigger {setup.trigger!r}", run, watcher, progress, first_row, write
            )
            pg_run = run
    finally:
        watcher.stop()
    found = arrivals(target, watcher.seen)
    keys = {row[0] for row in setup.cluster.execute(f"SELECT id FROM {table}", cdc.DATABASE)}
    check_exactly_once(name, found, keys)
    return result_of(
        "postgres CDC -> file",
        setup.trigger,
        pg_run,
        found,
        written,
        progress,
        destination,
        (load_before, os.getloadavg()),
    )


# printing ------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    return (
        f"median {ms(statistics.median(values))}, p90 {ms(cdc.percentile(values, 0.9))}, "
        f"max {ms(max(values))}"
    )


def report(r: Result) -> None:
    values, w = r.latencies, r.written
    p50, p99 = cdc.percentile(values, 0.5), cdc.percentile(values, 0.99)
    print(
        f"  written {w.rows:,} records in {w.seconds:.1f} s ({w.rows / w.seconds:,.0f}/s, "
        f"{w.transactions:,} writes) after {r.warm_up:,} warm-up records; all arrived exactly once\n"
        f"  latency p50 {ms(p50)}  p90 {ms(cdc.percentile(values, 0.9))}  p99 {ms(p99)}  "
        f"max {ms(max(values))}  (min {ms(min(values))})\n"
        f"  measured/goal: p50 {p50 / GOAL_P50:.2f} (goal {GOAL_P50:g} s), p99 {p99 / GOAL_P99:.2f} "
        f"(goal {GOAL_P99:g} s)"
    )
    rows = [e.read for e in r.batches]
    print(
        f"  {len(r.batches)} batches, records per batch median {statistics.median(rows):.0f} "
        f"(min {min(rows)}, max {max(rows)}); per batch:\n"
        f"    the engine's seconds (batch log): {spread([e.seconds for e in r.batches])}\n"
        f"      in the destination (staging with the Spark job, publish): {spread(r.destination_seconds)}\n"
        f"      the Spark job: {spread(r.job_seconds)}\n"
        f"    the batch log's end after its first file was seen: {spread(r.after_publish)}\n"
        f"    trigger start to the next trigger start: {spread(r.periods)}\n"
        f"    Spark's {cdc.describe_batches(r.progress).split(chr(10))[-1].strip()}"
    )
    legs = r.legs
    if legs["wait"]:
        total = [sum(parts) for parts in zip(*legs.values(), strict=True)]
        print(
            f"  where the latency goes ({len(total):,} of {len(values):,} records; mean {ms(statistics.mean(total))}):"
        )
        for key, label in LEGS:
            print(f"    {label + ':':80s} mean {ms(statistics.mean(legs[key])):>6s}; {spread(legs[key])}")
    (a1, a5, a15), (b1, b5, b15) = r.load
    print(f"  load average {a1:.2f} {a5:.2f} {a15:.2f} before, {b1:.2f} {b5:.2f} {b15:.2f} after")


def shown(trigger: str) -> str:
    return f"{trigger} (default)" if trigger == DEFAULT_TRIGGER_INTERVAL else trigger


def summary(results: list[Result]) -> None:
    print("\nSummary (seconds; measured/goal with goals p50 0.5 s, p99 1 s):")
    print(
        f"  {'pipeline':22s} {'trigger':28s} {'p50':>6s} {'p90':>6s} {'p99':>6s} {'max':>6s} "
        f"{'p50/goal':>8s} {'p99/goal':>8s} {'batch s':>8s}"
    )
    for r in results:
        v = r.latencies
        p50, p99 = cdc.percentile(v, 0.5), cdc.percentile(v, 0.99)
        print(
            f"  {r.pipeline:22s} {shown(r.trigger):28s} {p50:6.3f} {cdc.percentile(v, 0.9):6.3f} {p99:6.3f} "
            f"{max(v):6.3f} {p50 / GOAL_P50:8.2f} {p99 / GOAL_P99:8.2f} "
            f"{statistics.median(e.seconds for e in r.batches):8.3f}"
        )


# main ----------------------------------------------------------------------------------------------


@contextmanager
def postgres(needed: bool) -> Iterator[Any]:
    if not needed:
        yield None
        return
    cluster = cdc.start_cluster()
    try:
        yield cluster
    finally:
        cluster.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of records left out first")
    parser.add_argument("--rate", type=float, default=1000.0, help="records/s written")
    parser.add_argument(
        "--trigger",
        default=DEFAULT_TRIGGER_INTERVAL,
        help=f"trigger intervals to run, comma-separated (default: the engine's, {DEFAULT_TRIGGER_INTERVAL!r})",
    )
    parser.add_argument("--only", default="file,postgres", help="pipelines to run: file, postgres")
    parser.add_argument(
        "--session-warmup",
        type=float,
        default=20.0,
        help="seconds of an unmeasured file -> file run first (the first run in a fresh JVM is slower); 0: none",
    )
    parser.add_argument(
        "--polling-period",
        type=float,
        default=DEFAULT_POLLING,
        help=f"the Postgres source's pollingPeriod in s (default: the source's, {DEFAULT_POLLING:g})",
    )
    args = parser.parse_args()
    triggers = [t.strip() for t in args.trigger.split(",") if t.strip()]
    only = {p.strip() for p in args.only.split(",") if p.strip()}
    if not only <= {"file", "postgres"}:
        parser.error(f"--only: unknown pipeline {sorted(only - {'file', 'postgres'})}")

    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start "
        "(shared and noisy: numbers from one run)\n"
        f"the engine's default trigger: {DEFAULT_TRIGGER_INTERVAL!r}; this run: {', '.join(map(repr, triggers))}; "
        f"{args.rate:,.0f} records/s, {args.warmup:g} s warm-up, {args.seconds:g} s measured per run; "
        f"watcher every {cdc.WATCH_INTERVAL * 1000:.0f} ms"
    )
    workdir = Path(tempfile.mkdtemp(prefix="conduit-latency-bench-"))
    results: list[Result] = []
    spark = None
    try:
        with postgres("postgres" in only) as cluster:
            spark = get_session("local[2]", app_name="bench-latency")
            setup = None
            if cluster is not None:
                url = cluster.create_database(cdc.DATABASE)
                version = cluster.execute("SHOW server_version")[0][0]
                print(
                    f"PostgreSQL {version} (fsync off), source pollingPeriod {args.polling_period:g} s, "
                    "logrepl.plugin test_decoding"
                )
                setup = cdc.Setup(cluster, url, spark, workdir, DEFAULT_TRIGGER_INTERVAL, args.polling_period)
            print(f"Spark {spark.version} local[2]")
            if args.session_warmup > 0:
                print(
                    f"\nunmeasured: file -> file for {args.session_warmup:g} s, trigger {shown(triggers[0])}"
                )
                warm_up = argparse.Namespace(rate=args.rate, warmup=args.session_warmup, seconds=1.0)
                file_to_file(spark, workdir, "lat-session-warm-up", triggers[0], warm_up)  # counts checked
            for n, trigger in enumerate(triggers):
                if "file" in only:
                    print(f"\nfile -> json.decode -> file, trigger {shown(trigger)}")
                    results.append(file_to_file(spark, workdir, f"lat-file-{n}", trigger, args))
                    report(results[-1])
                if setup is not None:
                    print(f"\npostgres CDC -> file, trigger {shown(trigger)}")
                    results.append(postgres_to_file(replace(setup, trigger=trigger), f"lat-pg-{n}", args))
                    report(results[-1])
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    summary(results)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
