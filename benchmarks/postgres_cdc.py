"""CDC throughput and end-to-end latency of the ``builtin:postgres`` source (test_decoding slot).

One run on a fresh throwaway PostgreSQL cluster (tests/pgcluster.py) and a local[2] SparkSession, the
pipelines running continuously in this process (``PipelineRun``):

1. **Throughput**: ``builtin:postgres`` (``cdcMode: logrepl``, ``snapshotMode: never``) -> ``builtin:file``,
   and again -> ``builtin:postgres`` (upsert on ``id``). With the pipeline up (one warm-up row seen in the
   destination), ``--inserts`` rows are inserted in transactions of ``--txn`` rows, with updates (10 %) and
   deletes (5 %) in between, and the time from the first transaction's commit until every change is in
   the destination gives changes/s. "In the destination": for files, the moment a watcher thread saw the
   published ``*.jsonl`` file that completed the count; for PostgreSQL, the end of the micro-batch that
   committed the last change (the engine's ``on_batch`` callback, right after the destination's commit).
2. **Latency at a steady rate**: a writer thread inserts rows at ``--rates`` rows/s for ``--seconds`` each,
   one row per transaction while it keeps up (a few rows per transaction when it falls behind); each row
   carries ``clock_timestamp()`` at insert. A watcher thread lists the file destination every 20 ms and
   notes when each ``*.jsonl`` file appeared; a record's latency is that moment minus its timestamp.

No asserts on timings; the record counts are checked (a wrong count is a bug, not noise).

    nice -n 10 .venv/bin/python benchmarks/postgres_cdc.py [--inserts N] [--txn T] [--rates 500,2000]
        [--seconds S] [--trigger "100 milliseconds"] [--polling-period 0.1] [--no-pg-destination]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import psycopg  # noqa: E402
from pgcluster import APP_USER, PostgresCluster, start_cluster  # noqa: E402

from airflow_conduit.config import load_pipeline_text  # noqa: E402
from airflow_conduit.engine.job import PipelineRun, RunOptions  # noqa: E402
from airflow_conduit.engine.session import get_session  # noqa: E402
from airflow_conduit.state import PipelineState  # noqa: E402

DATABASE = "cdcbench"
ROW_DDL = "CREATE TABLE {name} (id bigint PRIMARY KEY, v text, n int NOT NULL DEFAULT 0)"
LATENCY_DDL = (
    "CREATE TABLE {name} (id bigserial PRIMARY KEY, phase int NOT NULL, "
    "ts double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp())::double precision)"
)
WATCH_INTERVAL = 0.02
MAX_ROWS_PER_TXN = 50  # the rate writer's transactions when it falls behind
DRAIN_TIMEOUT = 300.0
PROGRESS_KEYS = (
    "triggerExecution",
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "walCommit",
    "commitOffsets",
)

SOURCE = """
version: "2.2"
pipelines:
  - id: {id}
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings:
          url: "{url}"
          tables: {table}
          cdcMode: logrepl
          snapshotMode: never
          logrepl.slotName: {slot}
          logrepl.plugin: test_decoding
          pollingPeriod: {polling}
{destination}
"""
FILE_DESTINATION = """      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{path}"
"""
PG_DESTINATION = """      - id: out
        type: destination
        plugin: builtin:postgres
        settings:
          url: "{url}"
          table: {table}
          key: id
"""


# watching the destination -------------------------------------------------------------------------


class Tally:
    """A running count and when it grew: one thread adds, another reads."""

    def __init__(self) -> None:
        self.total = 0
        self.events: list[tuple[float, int]] = []
        """(when, count so far), one per addition."""
        self._lock = threading.Lock()

    def add(self, when: float, count: int) -> None:
        with self._lock:
            self.total += count
            self.events.append((when, self.total))

    def count(self) -> int:
        with self._lock:
            return self.total

    def reached(self, total: int) -> float | None:
        """When the count first reached ``total``."""
        with self._lock:
            return next((when for when, so_far in self.events if so_far >= total), None)


class FileWatcher(threading.Thread, Tally):
    """Lists a file destination every WATCH_INTERVAL and notes when each published ``*.jsonl`` file was
    first seen and how many lines it holds (published files are complete and never change)."""

    def __init__(self, directory: Path) -> None:
        threading.Thread.__init__(self, name="watcher", daemon=True)
        Tally.__init__(self)
        self.directory = directory
        self.seen: dict[str, float] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                names = os.listdir(self.directory)
            except FileNotFoundError:
                names = []
            now = time.time()
            for name in sorted(names):
                if name.endswith(".jsonl") and not name.startswith(("_", ".")) and name not in self.seen:
                    self.seen[name] = now
                    with open(self.directory / name, "rb") as fh:
                        count = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
                    self.add(now, count)
            self._halt.wait(WATCH_INTERVAL)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


class BatchLog(Tally):
    """The engine's ``on_batch`` callback: when each micro-batch finished and the records read so far."""

    def __call__(self, run: PipelineRun, result: Any) -> None:
        self.add(time.time(), result.read)


@dataclass
class Progress:
    """Spark's progress reports of the query, by batch id (``recentProgress`` keeps only the last 100):
    rows, the trigger's start and the durations of PROGRESS_KEYS."""

    batches: dict[int, dict[str, Any]] = field(default_factory=dict)

    def collect(self, run: PipelineRun) -> None:
        if run.query is None:
            return
        for progress in run.query.recentProgress:
            if progress.numInputRows:
                self.batches[progress.batchId] = {
                    "rows": progress.numInputRows,
                    "started": progress.timestamp,  # the trigger's start (ISO-8601 UTC)
                    **{k: v for k, v in progress.durationMs.items() if k in PROGRESS_KEYS},
                }

    def settle(self, run: PipelineRun, rows: int, timeout: float = 15.0) -> None:
        """Collect until the reports account for ``rows`` rows: Spark posts a batch's report only after
        the destination already holds it."""
        deadline = time.monotonic() + timeout
        self.collect(run)
        while sum(b["rows"] for b in self.batches.values()) < rows and time.monotonic() < deadline:
            time.sleep(0.1)
            self.collect(run)

    def since(self, batch_id: int) -> list[dict[str, Any]]:
        return [b for i, b in sorted(self.batches.items()) if i > batch_id]

    def last_id(self) -> int:
        return max(self.batches, default=-1)


def describe_batches(batches: list[dict[str, Any]]) -> str:
    if not batches:
        return "no batches with data reported"
    rows = [b["rows"] for b in batches]
    if len(rows) <= 5:
        parts = [f"{len(batches)} batches of {', '.join(str(r) for r in rows)} rows"]
    else:
        parts = [f"{len(batches)} batches, rows/batch median {statistics.median(rows):.0f} (max {max(rows)})"]
    times = ", ".join(
        f"{key} {statistics.median(b.get(key, 0) for b in batches):.0f}"
        for key in PROGRESS_KEYS
        if any(key in b for b in batches)
    )
    return "; ".join(parts) + f"\n      median ms per batch: {times}"


# the pipeline --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    cluster: PostgresCluster
    url: str
    spark: Any
    workdir: Path
    trigger: str
    polling: float


@contextmanager
def pipeline(
    setup: Setup, pipeline_id: str, table: str, destination: str, **hooks: Any
) -> Iterator[PipelineRun]:
    """A continuous run of ``table`` -> ``destination``; stopped (and its slot dropped) on the way out."""
    slot = f"bench_{pipeline_id.replace('-', '_')}"
    text = SOURCE.format(
        id=pipeline_id, url=setup.url, table=table, slot=slot, polling=setup.polling, destination=destination
    )
    config = load_pipeline_text(text, str(setup.workdir / f"{pipeline_id}.yaml")).pipelines[0]
    state = PipelineState(setup.workdir / "state", config.id)
    run = PipelineRun(setup.spark, config, state, RunOptions(trigger_interval=setup.trigger), **hooks)
    run.start()
    try:
        # snapshotMode never: changes count from the slot's creation (the first trigger's initialOffset).
        deadline = time.monotonic() + 120
        while not setup.cluster.execute(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", DATABASE, (slot,)
        ):
            if not run.query.isActive or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{pipeline_id}: the replication slot was not created: {run.query.exception()}"
                )
            time.sleep(0.1)
        yield run
    finally:
        run.request_stop()
        payload = run.wait()
        if payload["exit_code"] != 0:
            print(f"  ! {pipeline_id} ended with {json.dumps(payload['error'])}", file=sys.stderr)
        setup.cluster.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
            DATABASE,
            (slot,),
        )


def wait_for(
    count: Callable[[], int], total: int, run: PipelineRun, what: str, tick: Callable[[], None] | None = None
) -> None:
    """Until ``count()`` reaches ``total``; ``tick`` about once a second meanwhile."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    next_tick = time.monotonic() + 1
    while count() < total:
        if tick is not None and time.monotonic() >= next_tick:
            tick()
            next_tick = time.monotonic() + 1
        if run.query is None or not run.query.isActive:
            raise RuntimeError(f"{what}: the pipeline stopped: {run.query and run.query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: only {count()} of {total} records after {DRAIN_TIMEOUT:.0f}s")
        time.sleep(0.01)


# 1. throughput -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Changes:
    changes: int
    inserted: int
    deleted: int
    first_commit: float
    last_commit: float


def make_changes(url: str, table: str, inserts: int, txn: int) -> Changes:
    """Insert ``inserts`` rows in transactions of ``txn``; after every 10th insert transaction update
    ``txn`` earlier rows, after every 20th delete ``txn`` other earlier rows (each in its own transaction)."""
    changes = inserted = deleted = 0
    first_commit = 0.0
    with psycopg.connect(url, autocommit=True) as conn:
        for i, start in enumerate(range(0, inserts, txn)):
            stop = min(inserts, start + txn)
            conn.execute(
                f"INSERT INTO {table} (id, v) SELECT g, 'row-' || g FROM generate_series(%s::bigint, %s::bigint) g",
                (start, stop - 1),
            )
            changes += stop - start
            inserted += stop - start
            if i == 0:
                first_commit = time.time()
            if i % 10 == 9:  # rows of an earlier transaction, not deleted below
                low = start - 5 * txn
                changes += conn.execute(
                    f"UPDATE {table} SET n = n + 1, v = v || '+' WHERE id >= %s AND id < %s", (low, low + txn)
                ).rowcount
            if i % 20 == 19:
                low = start - 9 * txn
                count = conn.execute(
                    f"DELETE FROM {table} WHERE id >= %s AND id < %s", (low, low + txn)
                ).rowcount
                changes += count
                deleted += count
    return Changes(changes, inserted, deleted, first_commit, time.time())


def throughput(setup: Setup, destination: str, inserts: int, txn: int) -> None:
    name = f"tp_{destination}"
    setup.cluster.execute(ROW_DDL.format(name=name), DATABASE)
    setup.cluster.execute(f"ALTER TABLE {name} OWNER TO {APP_USER}", DATABASE)
    out = setup.workdir / f"out-{name}"
    if destination == "file":
        sink = FILE_DESTINATION.format(path=out)
    else:
        setup.cluster.execute(ROW_DDL.format(name=f"{name}_out"), DATABASE)
        setup.cluster.execute(f"ALTER TABLE {name}_out OWNER TO {APP_USER}", DATABASE)
        sink = PG_DESTINATION.format(url=setup.url, table=f"{name}_out")
    watcher = FileWatcher(out)
    batches = BatchLog()
    progress = Progress()
    watcher.start()
    try:
        with pipeline(setup, f"tp-{destination}", name, sink, on_batch=batches) as run:
            seen: Callable[[], int] = watcher.count if destination == "file" else batches.count
            reached = watcher.reached if destination == "file" else batches.reached
            with psycopg.connect(setup.url, autocommit=True) as conn:  # warm-up: the pipeline is up
                conn.execute(f"INSERT INTO {name} (id, v) VALUES (-1, 'warm-up')")
            wait_for(seen, 1, run, "warm-up")
            progress.settle(run, 1)
            before = progress.last_id()
            done = make_changes(setup.url, name, inserts, txn)
            total = done.changes + 1
            # Progress collected while draining: Spark keeps only the last 100 reports.
            wait_for(seen, total, run, name, tick=lambda: progress.collect(run))
            ended = reached(total)
            progress.settle(run, total)
            assert ended is not None
    finally:
        watcher.stop()
    if destination == "postgres":
        rows = setup.cluster.execute(f"SELECT count(*), sum(n) FROM {name}_out", DATABASE)[0]
        expected = setup.cluster.execute(f"SELECT count(*), sum(n) FROM {name}", DATABASE)[0]
        if tuple(rows) != tuple(expected):
            raise RuntimeError(f"{name}_out holds (rows, sum n) {rows}, the source table {expected}")
    elif watcher.count() != total:
        raise RuntimeError(f"{out} holds {watcher.count()} records, expected {total}")
    seconds = ended - done.first_commit
    writer = done.last_commit - done.first_commit
    print(
        f"  -> {destination:8s} {done.changes} changes ({done.inserted} inserts, "
        f"{done.changes - done.inserted - done.deleted} updates, {done.deleted} deletes) in "
        f"{seconds:.2f} s from the first commit: {done.changes / seconds:,.0f} changes/s\n"
        f"      (the writer committed them in {writer:.2f} s = {done.changes / writer:,.0f} changes/s; "
        f"the last was in the destination {ended - done.last_commit:.2f} s after its commit)\n"
        f"      {describe_batches(progress.since(before))}"
    )


# 2. latency ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    rows: int
    transactions: int
    seconds: float


def paced_writer(
    url: str, table: str, phase: int, rate: float, seconds: float, halt: threading.Event
) -> Written:
    """``rate`` rows/s for ``seconds``: one row per transaction while on schedule, the rows that are due
    (at most MAX_ROWS_PER_TXN) in one transaction when behind."""
    total = int(rate * seconds)
    written = transactions = 0
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.monotonic()
        while written < total and not halt.is_set():
            now = time.monotonic()
            due = min(total, int((now - start) * rate) + 1)
            if due <= written:
                time.sleep(max(0.0, start + written / rate - now))
                continue
            rows = min(due - written, MAX_ROWS_PER_TXN)
            if rows == 1:
                conn.execute(f"INSERT INTO {table} (phase) VALUES (%s)", (phase,))
            else:
                conn.execute(
                    f"INSERT INTO {table} (phase) SELECT %s FROM generate_series(1, %s::int)", (phase, rows)
                )
            written += rows
            transactions += 1
        elapsed = time.monotonic() - start
    return Written(written, transactions, elapsed)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def latencies_by_phase(directory: Path, seen: dict[str, float]) -> dict[int, list[float]]:
    by_phase: dict[int, list[float]] = {}
    for name, when in seen.items():
        for line in (directory / name).read_text().splitlines():
            after = (json.loads(line).get("payload") or {}).get("after") or {}
            if "ts" in after:
                by_phase.setdefault(int(after["phase"]), []).append(when - float(after["ts"]))
    return by_phase


def latency(setup: Setup, rates: list[float], seconds: float) -> None:
    name = "lat"
    setup.cluster.execute(LATENCY_DDL.format(name=name), DATABASE)
    setup.cluster.execute(f"ALTER TABLE {name} OWNER TO {APP_USER}", DATABASE)
    setup.cluster.execute(f"ALTER SEQUENCE {name}_id_seq OWNER TO {APP_USER}", DATABASE)
    out = setup.workdir / "out-lat"
    watcher = FileWatcher(out)
    progress = Progress()
    halt = threading.Event()
    results: list[tuple[float, Written, list[dict[str, Any]]]] = []
    watcher.start()
    try:
        with pipeline(setup, "latency", name, FILE_DESTINATION.format(path=out)) as run:
            with psycopg.connect(setup.url, autocommit=True) as conn:  # warm-up, phase 0
                conn.execute(f"INSERT INTO {name} (phase) VALUES (0)")
            wait_for(watcher.count, 1, run, "warm-up")
            expected = 1
            for phase, rate in enumerate(rates, start=1):
                progress.settle(run, expected)
                before = progress.last_id()
                box: list[Written] = []
                writer = threading.Thread(
                    target=lambda b=box, r=rate, p=phase: b.append(
                        paced_writer(setup.url, name, p, r, seconds, halt)
                    ),
                    name=f"writer-{rate:g}",
                    daemon=True,
                )
                writer.start()
                while writer.is_alive():
                    writer.join(2)
                    progress.collect(run)
                    if not run.query.isActive:
                        raise RuntimeError(f"latency: the pipeline stopped: {run.query.exception()}")
                if not box:
                    raise RuntimeError(f"latency: the writer at {rate:g} rows/s failed")
                expected += box[0].rows
                wait_for(watcher.count, expected, run, f"latency at {rate:g} rows/s")
                progress.settle(run, expected)
                results.append((rate, box[0], progress.since(before)))
    finally:
        halt.set()
        watcher.stop()
    if watcher.count() != expected:
        raise RuntimeError(f"{out} holds {watcher.count()} records, expected {expected}")
    by_phase = latencies_by_phase(out, watcher.seen)
    for phase, (rate, written, batches) in enumerate(results, start=1):
        values = by_phase.get(phase, [])
        if len(values) != written.rows:
            raise RuntimeError(f"phase {phase}: {len(values)} records in the files, {written.rows} written")
        print(
            f"  -> target {rate:6,.0f} rows/s: achieved {written.rows / written.seconds:7,.0f} rows/s "
            f"({written.rows} rows in {written.transactions} transactions, {written.seconds:.1f} s); latency "
            f"p50 {percentile(values, 0.5) * 1000:6.0f} ms  p99 {percentile(values, 0.99) * 1000:6.0f} ms  "
            f"max {max(values) * 1000:6.0f} ms  (min {min(values) * 1000:.0f} ms)\n"
            f"      {describe_batches(batches)}"
        )


# main ----------------------------------------------------------------------------------------------


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inserts", type=int, default=200_000)
    parser.add_argument("--txn", type=int, default=1_000, help="rows per insert transaction (throughput)")
    parser.add_argument("--rates", default="500,2000", help="rows/s of the latency phases, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each latency phase")
    parser.add_argument("--trigger", default="100 milliseconds", help="the micro-batch trigger interval")
    parser.add_argument("--polling-period", type=float, default=0.1, help="the source's pollingPeriod (s)")
    parser.add_argument("--no-pg-destination", action="store_true", help="skip the postgres destination run")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r.strip()]

    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start "
        "(shared and noisy: numbers from one run)"
    )
    workdir = Path(tempfile.mkdtemp(prefix="conduit-cdc-bench-"))
    cluster = start_cluster()
    spark = None
    try:
        url = cluster.create_database(DATABASE)
        spark = get_session("local[2]", app_name="bench-postgres-cdc")
        version = cluster.execute("SHOW server_version")[0][0]
        print(
            f"PostgreSQL {version} (fsync off), Spark {spark.version} local[2], trigger {args.trigger!r}, "
            f"source pollingPeriod {args.polling_period:g} s, maxRecordsPerBatch default"
        )
        setup = Setup(cluster, url, spark, workdir, args.trigger, args.polling_period)

        print(
            f"\n1. CDC throughput: {args.inserts} inserts in transactions of {args.txn}, plus updates and deletes"
        )
        throughput(setup, "file", args.inserts, args.txn)
        if not args.no_pg_destination:
            throughput(setup, "postgres", args.inserts, args.txn)

        print(
            f"\n2. End-to-end latency (commit -> published file seen, watcher every {WATCH_INTERVAL * 1000:.0f} ms)"
        )
        latency(setup, rates, args.seconds)

        load = os.getloadavg()
        print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(NOTE)
    finally:
        if spark is not None:
            spark.stop()
        cluster.destroy()
        shutil.rmtree(workdir, ignore_errors=True)


NOTE = """
What the latency is made of (read with the per-batch medians above):
  - a change waits for the next micro-batch to start: up to one trigger interval, or, when batches run
    back to back, up to one whole batch (a record committed just after a batch fixed its end offset
    rides the next one); after an empty poll the source does not peek again for pollingPeriod;
  - latestOffset: the driver peeks the slot (pg_logical_slot_peek_changes) from the slot's confirmed
    position, which Spark acknowledges (commit) one batch late, so each peek decodes the previous batch's
    WAL again before the new changes; read() on the executor peeks a second time up to the batch's end;
  - addBatch: the Spark job that reads the batch and the engine's per-batch work (persist, count, stage,
    atomic rename, publish, marker): a fixed cost even for a handful of rows, plus the rows themselves;
  - walCommit/commitOffsets: Spark's offset and commit logs (a small file each per batch).
So p50 is roughly one and a half batch durations, and p99/max follow the slowest batches (GC, the other
tenants of this 2-core machine)."""


if __name__ == "__main__":
    main()
