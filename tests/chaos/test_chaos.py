"""Chaos: SIGKILL at random moments and a PostgreSQL outage, then every record exactly once.

Runs alone (``make chaos``): each test starts the real CLI as a subprocess against a throwaway
PostgreSQL cluster, many times, and prints the counts it verified. The seed of the random kill times is
printed so a failing run can be repeated (``CHAOS_SEED``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import read_jsonl, text
from tests.pgcluster import APP_PASSWORD

pytestmark = pytest.mark.chaos

CLI = [sys.executable, "-m", "airflow_conduit.cli"]
RECORDS = 200_000
PER_BATCH = 10_000

TAG = """
def tag(record):
    record["payload"]["after"]["seq"] = int(record["key"])
    return record
"""

PIPELINE = """
version: "2.2"
pipelines:
  - id: chaos
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: {records}
          maxRecordsPerBatch: {per_batch}
          format.options.customer: string
          format.options.amount: int
      - {{id: files, type: destination, plugin: builtin:file, settings: {{path: "{out}"}}}}
      - {{id: db, type: destination, plugin: builtin:postgres, settings: {{url: "{url}", table: events}}}}
    processors:
      - {{id: tag, plugin: custom.python, settings: {{function: "chaos_tag:tag", path: "{udf}"}}}}
"""


RANDOM_NACKS = """
import random

from chaos_tag import tag


def tag_or_nack(record):
    # A flaky service: about one call in ten fails, at random (a replay draws again).
    if random.random() < 0.1:
        raise ValueError("the service refused")
    return tag(record)
"""
TAKE_EVERY_NACK = """    dead-letter-queue:
      plugin: builtin:file
      settings: {{path: "{dlq}"}}
      window-size: 0
"""


def write_pipeline(tmp_path: Path, url: str, records: int = RECORDS, random_nacks: bool = False) -> Path:
    """``random_nacks``: the processor nacks about 10% of the records at random, into a file DLQ."""
    udf = tmp_path / "udf"
    udf.mkdir(exist_ok=True)
    (udf / "chaos_tag.py").write_text(TAG)
    (udf / "chaos_random.py").write_text(RANDOM_NACKS)
    text = PIPELINE
    if random_nacks:
        text = text.replace("chaos_tag:tag", "chaos_random:tag_or_nack") + TAKE_EVERY_NACK
    pipeline = tmp_path / "chaos.yaml"
    pipeline.write_text(
        text.format(
            records=records, per_batch=PER_BATCH, out=tmp_path / "out", url=url, udf=udf, dlq=tmp_path / "dlq"
        )
    )
    return pipeline


def create_table(pg, database: str) -> str:
    url = pg.create_database(database)
    # No unique constraint: a batch written twice would show as duplicate seqs.
    pg.execute("CREATE TABLE events (seq bigint, customer text, amount bigint)", database)
    pg.execute("GRANT ALL ON events TO conduit", database)
    return url


def start_run(pipeline: Path, state: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "run", str(pipeline), "--until-idle", "--state-dir", str(state)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def seeded_random() -> random.Random:
    """Random kill times, from ``CHAOS_SEED`` when set; the seed is printed to repeat a failing run."""
    seed = int(os.environ.get("CHAOS_SEED", random.randrange(1 << 30)))
    print(f"\nCHAOS_SEED={seed}")
    return random.Random(seed)


def run_and_kill(
    pipeline: Path, state: Path, log: Path, ready: Callable[[], bool], pause: float
) -> tuple[bool, subprocess.Popen]:
    """Start a run, wait until ``ready()`` says a batch of it is under way, wait ``pause`` seconds more
    and SIGKILL it (the driver and its JVM). Returns whether it was killed, and the ended process."""
    process = start_run(pipeline, state, log)
    try:
        if wait_until(ready, 300, process):
            time.sleep(pause)
        killed = process.poll() is None
        if killed:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return killed, process


def log_entries(state: Path, kind: str) -> set[int]:
    directory = state / "chaos" / "checkpoint" / kind
    return {int(p.name) for p in directory.glob("*") if p.name.isdigit()} if directory.exists() else set()


def new_commit(state: Path, committed: set[int]) -> Callable[[], bool]:
    """True once a batch beyond ``committed`` has committed."""
    return lambda: bool(log_entries(state, "commits") - committed)


def staging_under_way(out: Path) -> Callable[[], bool]:
    """True while the file destination stages a batch (its hidden ``_tmp-`` directory exists)."""
    return lambda: any(out.glob("_tmp-*"))


def wait_until(condition, timeout: float, process: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process is not None and process.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def finish_run(pipeline: Path, state: Path) -> None:
    """The last run, left alone: it must drain the source and stop gracefully."""
    final = subprocess.run(
        [*CLI, "run", str(pipeline), "--until-idle", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert final.returncode == 0, final.stderr[-3000:]


def kill_six_times(
    pipeline: Path,
    state: Path,
    log: Path,
    records: int,
    moment: Callable[[set[int]], tuple[Callable[[], bool], float]],
) -> None:
    """Start runs and SIGKILL each at ``moment(committed batches)`` (a readiness check and a pause)
    until six were killed or the source is drained; at least five must be. Then the final run."""
    kills, kill_points = 0, []
    while kills < 6:
        committed = log_entries(state, "commits")
        if len(committed) * PER_BATCH >= records:
            break
        ready, pause = moment(committed)
        killed, _ = run_and_kill(pipeline, state, log, ready, pause)
        if killed:
            kills += 1
            kill_points.append(
                (len(log_entries(state, "offsets")), len(log_entries(state, "commits")), round(pause, 2))
            )
    print(f"killed {kills} times at (offsets logged, batches committed, pause s): {kill_points}")
    assert kills >= 5, f"the run finished before 5 kills ({kill_points}); see {log}"
    finish_run(pipeline, state)


def verify_exactly_once(tmp_path: Path, pg, database: str, records: int) -> None:
    file_keys = Counter(int(text(r["key"])) for r in read_jsonl(tmp_path / "out"))
    db_rows = pg.execute("SELECT seq, count(*) FROM events GROUP BY seq", database)
    db_keys = Counter({seq: n for seq, n in db_rows})
    expected = set(range(records))
    print(
        f"\nverified: file destination {sum(file_keys.values())} records, {len(file_keys)} distinct; "
        f"postgres {sum(db_keys.values())} rows, {len(db_keys)} distinct; expected {records}"
    )
    assert set(file_keys) == expected, "file destination: records lost or unexpected"
    assert set(db_keys) == expected, "postgres destination: records lost or unexpected"
    assert [k for k, n in file_keys.items() if n > 1] == [], "file destination: duplicates"
    assert [k for k, n in db_keys.items() if n > 1] == [], "postgres destination: duplicates"
    # Per-source order at the file destination: delivery order is source order.
    ordered = [int(text(r["key"])) for r in read_jsonl(tmp_path / "out")]
    assert ordered == sorted(ordered)


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(pg, tmp_path):
    rng = seeded_random()
    url = create_table(pg, "chaos_kill")
    pipeline = write_pipeline(tmp_path, url)
    state = tmp_path / "state"

    def moment(committed: set[int]) -> tuple[Callable[[], bool], float]:
        # A random moment inside a batch this process is running: after it committed one (somewhere in
        # the next), or once the file destination stages (between the destinations' writes, their
        # publishes, and Spark's commit).
        if rng.random() < 0.5:
            return new_commit(state, committed), rng.uniform(0, 2.5)
        return staging_under_way(tmp_path / "out"), rng.uniform(0, 1)

    kill_six_times(pipeline, state, tmp_path / "runs.log", RECORDS, moment)
    verify_exactly_once(tmp_path, pg, "chaos_kill", RECORDS)


def decision_logging(state: Path) -> Callable[[], bool]:
    """True once a batch's decision is being logged: its outputs publish, one after another, right
    after (the entry is gone once they all did, too soon for a poll to catch every time)."""
    return lambda: any((state / "chaos" / "decisions").glob("*"))


def test_random_nacks_under_sigkill_put_each_record_in_the_destinations_or_the_dlq(pg, tmp_path):
    """A processor that nacks at random is decided again on every replay, unless the engine keeps the
    decision: killed between two publishes, a record could reach a destination and the DLQ, or
    neither."""
    rng = seeded_random()
    records = RECORDS
    url = create_table(pg, "chaos_nacks")
    pipeline = write_pipeline(tmp_path, url, records, random_nacks=True)
    state = tmp_path / "state"

    def moment(committed: set[int]) -> tuple[Callable[[], bool], float]:
        # A third of the kills land between the publishes of one batch, the rest anywhere in a batch.
        choice = rng.random()
        if choice < 1 / 3:
            return decision_logging(state), rng.uniform(0, 0.4)
        if choice < 2 / 3:
            return staging_under_way(tmp_path / "out"), rng.uniform(0, 1)
        return new_commit(state, committed), rng.uniform(0, 2.5)

    kill_six_times(pipeline, state, tmp_path / "runs.log", records, moment)

    file_keys = Counter(int(text(r["key"])) for r in read_jsonl(tmp_path / "out"))
    db_keys = Counter(
        {seq: n for seq, n in pg.execute("SELECT seq, count(*) FROM events GROUP BY seq", "chaos_nacks")}
    )
    dlq_keys = Counter(int(text(r["payload"]["after"]["key"])) for r in read_jsonl(tmp_path / "dlq"))
    print(
        f"verified: file {sum(file_keys.values())}, postgres {sum(db_keys.values())}, "
        f"DLQ {sum(dlq_keys.values())} of {records} records"
    )
    for name, keys in (("file", file_keys), ("postgres", db_keys), ("DLQ", dlq_keys)):
        assert [k for k, n in keys.items() if n > 1] == [], f"{name}: duplicates"
    assert set(file_keys) == set(db_keys), "the destinations disagree on which records were nacked"
    assert not set(file_keys) & set(dlq_keys), "records both written and in the DLQ"
    assert set(file_keys) | set(dlq_keys) == set(range(records)), "records in neither"
    assert 0.05 * records < len(dlq_keys) < 0.15 * records  # the processor did nack, at about 10%


def test_postgres_stopped_mid_run_is_transient_and_the_restart_completes(pg, tmp_path):
    records = 60_000
    url = create_table(pg, "chaos_outage")
    pipeline = write_pipeline(tmp_path, url, records)
    state, log = tmp_path / "state", tmp_path / "runs.log"
    process = start_run(pipeline, state, log)
    try:
        assert wait_until(lambda: len(log_entries(state, "commits")) >= 1, 300, process), log.read_text()[
            -3000:
        ]
        pg.stop("immediate")  # the database goes away without warning
        try:
            process.wait(timeout=300)
        finally:
            pg.start()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 75, log.read_text()[-3000:]
    exit_text = (state / "chaos" / "exit.json").read_text()
    error = json.loads(exit_text)["error"]
    assert error["kind"] == "transient" and "unreachable" in error["message"], error
    assert APP_PASSWORD not in log.read_text() + exit_text  # the password never shows
    finish_run(pipeline, state)
    verify_exactly_once(tmp_path, pg, "chaos_outage", records)


CDC_PIPELINE = """
version: "2.2"
pipelines:
  - id: chaos
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings: {{url: "{url}", tables: items, logrepl.slotName: chaos_slot, maxRecordsPerBatch: 2000}}
      - {{id: files, type: destination, plugin: builtin:file, settings: {{path: "{out}"}}}}
"""


def lsn(text_lsn: str) -> int:
    high, low = text_lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def committed_end_lsn(state: Path) -> int | None:
    """The source offset (a commit LSN) at the end of the last batch Spark committed."""
    commits = log_entries(state, "commits")
    if not commits:
        return None
    offsets = (state / "chaos" / "checkpoint" / "offsets" / str(max(commits))).read_text().splitlines()
    offset = json.loads(offsets[2])
    return lsn(offset["lsn"]) if offset.get("phase") == "cdc" else None


def test_cdc_under_sigkill_confirms_nothing_early_and_delivers_every_change_once(pg, tmp_path):
    rng = seeded_random()
    url = pg.create_database("chaos_cdc")
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, v text)", "chaos_cdc")
    pg.execute("GRANT ALL ON items TO conduit", "chaos_cdc")
    # pgoutput reads a publication, which only the table's owner may create (the source uses it).
    pg.execute("CREATE PUBLICATION conduitpub FOR TABLE items", "chaos_cdc")
    pipeline = tmp_path / "cdc.yaml"
    pipeline.write_text(CDC_PIPELINE.format(url=url, out=tmp_path / "out"))
    state, log = tmp_path / "state", tmp_path / "runs.log"
    first = start_run(pipeline, state, log)  # takes the (empty) snapshot and creates the slot
    assert first.wait(timeout=300) == 0, log.read_text()[-3000:]

    # 30,000 changes in transactions of 100: inserts, then updates and deletes of some of them.
    inserts, updates, deletes = 20_000, 6_000, 4_000
    for start in range(0, inserts, 100):
        pg.execute(
            "INSERT INTO items SELECT g, 'v' || g FROM generate_series(%s::int, %s::int) g",
            "chaos_cdc",
            (start, start + 99),
        )
    for start in range(0, updates, 100):
        pg.execute(
            "UPDATE items SET v = v || '!' WHERE id BETWEEN %s::int AND %s::int",
            "chaos_cdc",
            (start, start + 99),
        )
    for start in range(inserts - deletes, inserts, 100):
        pg.execute("DELETE FROM items WHERE id BETWEEN %s::int AND %s::int", "chaos_cdc", (start, start + 99))

    kills, checks = 0, []
    while kills < 5:
        committed = log_entries(state, "commits")
        killed, process = run_and_kill(pipeline, state, log, new_commit(state, committed), rng.uniform(0, 2))
        if not killed and process.returncode == 0:
            break  # drained before the kill: nothing left to interrupt
        kills += killed
        # Ack after persist: the slot never confirms past the end of the last committed batch.
        confirmed = pg.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'chaos_slot'"
        )[0][0]
        end = committed_end_lsn(state)
        checks.append((confirmed, end))
        assert end is None or lsn(confirmed) <= end, f"slot confirmed {confirmed} past committed end {end}"
    print(f"killed {kills} times; slot checks (confirmed, committed end): {checks}")
    assert kills >= 3, f"the changes were drained after {kills} kills; see {log}"
    finish_run(pipeline, state)

    records = read_jsonl(tmp_path / "out")
    positions = Counter(r["position"] for r in records)
    operations = Counter(r["operation"] for r in records)
    print(f"verified: {len(records)} change records, {len(positions)} distinct positions, {dict(operations)}")
    assert [p for p, n in positions.items() if n > 1] == [], "a change was delivered twice"
    assert operations == {"create": inserts, "update": updates, "delete": deletes}
    created = sorted(r["payload"]["after"]["id"] for r in records if r["operation"] == "create")
    assert created == list(range(inserts))
