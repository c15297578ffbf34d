"""``builtin:postgres`` source against a real PostgreSQL 15 (tests/pgcluster.py) and real local Spark:
snapshot, CDC through a pgoutput (by default) or test_decoding slot (acked only after the batch
committed), long polling, errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import read_jsonl
from tests.pgcluster import _free_port

PIPELINE = """
version: "2.2"
pipelines:
  - id: pg-source
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings:
          url: "URL"
          tables: TABLES
          logrepl.slotName: SLOT
          maxRecordsPerBatch: 2
EXTRA
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{tmp}/out"
"""


def pipeline(url: str, tables: str, slot: str = "conduitslot", extra: str = "", more: str = "") -> str:
    settings = "".join(f"          {line}\n" for line in extra.splitlines() if line.strip())
    return (
        PIPELINE.replace("URL", url)
        .replace("TABLES", tables)
        .replace("SLOT", slot)
        .replace("EXTRA\n", settings)
        + more
    )


def sql(url: str, *statements: str) -> None:
    """Each statement in its own transaction, as the app user."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def slot_confirmed(pg, slot: str) -> int:
    from airflow_conduit.engine.connectors.postgres.decoding import lsn_to_int

    rows = pg.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", params=(slot,)
    )
    assert rows, f"slot {slot} missing"
    return lsn_to_int(rows[0][0])


def current_lsn(pg) -> int:
    from airflow_conduit.engine.connectors.postgres.decoding import lsn_to_int

    return lsn_to_int(pg.execute("SELECT pg_current_wal_insert_lsn()::text")[0][0])


def offsets(state_dir: Path, pipeline_id: str = "pg-source") -> list[dict[str, Any]]:
    """The source offsets in Spark's offset log, by batch."""
    directory = state_dir / pipeline_id / "checkpoint" / "offsets"
    if not directory.exists():
        return []
    batches = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    return [json.loads((directory / str(b)).read_text().splitlines()[-1]) for b in batches]


def committed_end_lsn(state_dir: Path, pipeline_id: str = "pg-source") -> int:
    """The end offset of the last batch in Spark's commit log (the last acknowledged batch)."""
    from airflow_conduit.engine.connectors.postgres.decoding import lsn_to_int

    checkpoint = state_dir / pipeline_id / "checkpoint"
    committed = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(committed)).read_text().splitlines()
    return lsn_to_int(json.loads(lines[-1])["lsn"])


def after_values(records: list[dict[str, Any]]) -> list[Any]:
    return [r["payload"]["after"] for r in records]


def test_snapshot_of_two_tables_in_key_order_with_typed_values(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgsrc_snapshot")
    sql(
        url,
        "CREATE TABLE orders (id int PRIMARY KEY, item text, amount numeric, paid boolean, extra jsonb)",
        "CREATE TABLE customers (email text PRIMARY KEY, name text)",
        "INSERT INTO orders VALUES (3, 'it''s three', 30.25, true, '{\"gift\": [1, 2]}'), "
        "(1, 'one', 10, false, NULL), (5, 'five words here', 12345678901234.5678, NULL, '[]'), "
        "(2, 'two', 123456789012345678901234567890123456789.5, true, '{}'), (4, NULL, -1.5, false, 'null')",
        "INSERT INTO customers VALUES ('b@x', 'Bea'), ('a@x', 'Al'), ('c@x', 'Cy')",
    )
    payload = run_yaml(pipeline(url, "orders,customers", slot="snap"))
    assert payload["exit_code"] == 0, payload
    records = read_jsonl(tmp_path / "out")
    assert [r["operation"] for r in records] == ["snapshot"] * 8
    assert [r["key"] for r in records] == [{"id": i} for i in range(1, 6)] + [
        {"email": e} for e in ("a@x", "b@x", "c@x")
    ]
    assert [r["metadata"]["opencdc.collection"] for r in records] == ["orders"] * 5 + ["customers"] * 3
    assert records[0]["metadata"]["postgres.table"] == "orders"
    orders = after_values(records[:5])
    assert orders[0] == {"id": 1, "item": "one", "amount": 10, "paid": False, "extra": None}
    assert orders[2] == {
        "id": 3,
        "item": "it's three",
        "amount": 30.25,
        "paid": True,
        "extra": {"gift": [1, 2]},
    }
    assert orders[4]["amount"] == 12345678901234.5678 and orders[4]["item"] == "five words here"
    # 40 digits: more than Spark keeps in a number, so every digit comes as text.
    assert orders[1]["amount"] == "123456789012345678901234567890123456789.5"
    assert orders[3]["item"] is None and orders[3]["extra"] is None
    assert after_values(records[5:])[1] == {"email": "b@x", "name": "Bea"}
    assert all(r["payload"]["before"] is None for r in records)
    # maxRecordsPerBatch 2: pages of 2 (3 + 2 batches), plus the step from the snapshot to CDC.
    assert payload["batches"] >= 5 and payload["records"]["read"] == 8

    # A second run has nothing new: the snapshot is not read again, and the slot holds no changes.
    again = run_yaml(pipeline(url, "orders,customers", slot="snap"))
    assert again["exit_code"] == 0 and again["records"]["read"] == 0
    assert len(read_jsonl(tmp_path / "out")) == 8


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_cdc_inserts_updates_deletes_across_until_idle_runs(pg, run_yaml, tmp_path, plugin: str) -> None:
    url = pg.create_database(f"pgsrc_cdc_{plugin}")
    slot = f"cdc_{plugin}"
    sql(
        url,
        "CREATE TABLE items (id int PRIMARY KEY, v text, n numeric)",
        "CREATE TABLE audit (id int PRIMARY KEY, v text)",
        "ALTER TABLE audit REPLICA IDENTITY FULL",
        "CREATE TABLE ignored (id int PRIMARY KEY)",
        "INSERT INTO items VALUES (1, 'a', 1)",
    )
    text = pipeline(url, "items,audit", slot=slot, extra=f"logrepl.plugin: {plugin}")
    assert run_yaml(text)["records"]["read"] == 1  # the snapshot
    sql(
        url,
        "INSERT INTO items VALUES (2, 'b', 2.5)",
        "INSERT INTO ignored VALUES (1)",
        "UPDATE items SET v = 'a2' WHERE id = 1",
        "INSERT INTO audit VALUES (10, 'x')",
        "UPDATE audit SET v = 'y' WHERE id = 10",
        "DELETE FROM items WHERE id = 2",
        "DELETE FROM audit WHERE id = 10",
    )
    second = run_yaml(text)
    assert second["exit_code"] == 0, second
    changes = read_jsonl(tmp_path / "out")[1:]
    assert [(r["operation"], r["metadata"]["opencdc.collection"], r["key"]) for r in changes] == [
        ("create", "items", {"id": 2}),
        ("update", "items", {"id": 1}),
        ("create", "audit", {"id": 10}),
        ("update", "audit", {"id": 10}),
        ("delete", "items", {"id": 2}),
        ("delete", "audit", {"id": 10}),
    ]
    assert changes[0]["payload"] == {"before": None, "after": {"id": 2, "v": "b", "n": 2.5}}
    # Default replica identity: no before for an update, the key for a delete.
    assert changes[1]["payload"] == {"before": None, "after": {"id": 1, "v": "a2", "n": 1}}
    assert changes[4]["payload"] == {"before": {"id": 2}, "after": None}
    # REPLICA IDENTITY FULL: the whole old row.
    assert changes[3]["payload"] == {"before": {"id": 10, "v": "x"}, "after": {"id": 10, "v": "y"}}
    assert changes[5]["payload"] == {"before": {"id": 10, "v": "y"}, "after": None}
    positions = [r["position"] for r in changes]
    assert len(set(positions)) == len(positions)

    # More changes while stopped: the next run picks up exactly those, nothing twice.
    sql(url, "INSERT INTO items VALUES (3, 'c', 3)", "INSERT INTO items VALUES (4, 'd', 4)")
    third = run_yaml(text)
    assert third["records"]["read"] == 2
    tail = read_jsonl(tmp_path / "out")[7:]
    assert [r["key"] for r in tail] == [{"id": 3}, {"id": 4}]
    assert slot_confirmed(pg, slot) <= committed_end_lsn(tmp_path / "state")
    assert pg.execute(
        "SELECT plugin::text FROM pg_replication_slots WHERE slot_name = %s", params=(slot,)
    ) == [(plugin,)]


def test_cdc_while_running_and_the_slot_advances_after_commit(pg, spark, tmp_path) -> None:
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import PipelineRun, RunOptions
    from airflow_conduit.state import PipelineState

    url = pg.create_database("pgsrc_live")
    sql(url, "CREATE TABLE events (id serial PRIMARY KEY, v text)", "INSERT INTO events (v) VALUES ('s')")
    text = pipeline(url, "events", slot="live", extra="pollingPeriod: 0.2").replace("{tmp}", str(tmp_path))
    config = load_pipeline_text(text, str(tmp_path / "p.yaml")).pipelines[0]
    state = PipelineState(tmp_path / "state", config.id)
    marks: list[int] = []
    run = PipelineRun(spark, config, state, RunOptions(until_idle=False)).start()

    def write_changes() -> None:
        for i in range(20):
            if i == 19:
                marks.append(current_lsn(pg))  # before the last transaction of the writer
            sql(url, f"INSERT INTO events (v) VALUES ('e{i}')")
            if i % 5 == 4:
                sql(
                    url,
                    f"UPDATE events SET v = 'u{i}' WHERE id = {i}",
                    f"DELETE FROM events WHERE id = {i + 1}",
                )
            time.sleep(0.05)

    writer = threading.Thread(target=write_changes)
    deadline = time.monotonic() + 180
    try:
        # Changes made while the snapshot is read may come twice (documented); this test wants each once.
        while not any(o["phase"] == "cdc" for o in offsets(tmp_path / "state")):
            assert time.monotonic() < deadline, "the snapshot did not finish"
            time.sleep(0.5)
        writer.start()
        expected = 1 + 20 + 4 + 4
        while time.monotonic() < deadline and len(read_jsonl(tmp_path / "out")) < expected:
            time.sleep(1)
        writer.join()
        # One more change so that Spark starts another batch and commits (acks) the one before it.
        sql(url, "INSERT INTO events (v) VALUES ('last')")
        while time.monotonic() < deadline and len(read_jsonl(tmp_path / "out")) < expected + 1:
            time.sleep(1)
    finally:
        run.request_stop()
        payload = run.wait()
    assert payload["exit_code"] == 0, payload
    records = read_jsonl(tmp_path / "out")
    operations = [r["operation"] for r in records]
    assert operations.count("snapshot") == 1
    assert operations.count("create") == 21 and operations.count("update") == 4
    assert operations.count("delete") == 4
    assert [r["payload"]["after"]["v"] for r in records if r["operation"] == "create"][-1] == "last"
    # Acked up to the writer's changes (their batch committed before the last one started), never past
    # the last committed batch.
    confirmed = slot_confirmed(pg, "live")
    assert marks[0] < confirmed <= committed_end_lsn(tmp_path / "state")


FAILING_SINK = """
import os
from airflow_conduit.errors import FatalError

def sink(records, delivery_hash):
    if os.path.exists(os.path.join(os.path.dirname(__file__), "fail")):
        if any((r["payload"]["after"] or {}).get("v") == "boom" for r in records):
            raise FatalError("refusing the boom record")
"""


def picky_pipeline(url: str, slot: str, tmp_path: Path, module: str) -> str:
    """Table ``t`` with row 1 and a pipeline whose ``custom.python`` destination refuses the batch with
    ``v = 'boom'`` while ``{tmp}/fail`` exists. ``module``: the sink's module name, one per test (a
    module imported by an earlier test in the process would be found first, in that test's directory)."""
    sql(url, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    (tmp_path / f"{module}.py").write_text(FAILING_SINK)
    sink = f"""
      - id: picky
        type: destination
        plugin: custom.python
        settings:
          function: {module}:sink
          path: "{{tmp}}"
"""
    return pipeline(url, "t", slot=slot, more=sink)


def test_the_slot_never_confirms_past_a_batch_that_did_not_commit(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgsrc_ack")
    text = picky_pipeline(url, "ack", tmp_path, "failsink")
    assert run_yaml(text)["exit_code"] == 0
    sql(url, "INSERT INTO t VALUES (2, 'b')")
    assert run_yaml(text)["exit_code"] == 0
    before_boom = current_lsn(pg)
    sql(url, "INSERT INTO t VALUES (3, 'boom')", "INSERT INTO t VALUES (4, 'd')")
    (tmp_path / "fail").write_text("")

    failed = run_yaml(text)
    assert failed["exit_code"] == 1, failed
    assert "refusing the boom record" in failed["error"]["message"]
    # The file destination may have written the batch, but it was not committed: not acknowledged.
    confirmed = slot_confirmed(pg, "ack")
    assert confirmed <= committed_end_lsn(tmp_path / "state")
    assert confirmed <= before_boom

    (tmp_path / "fail").unlink()
    recovered = run_yaml(text)
    assert recovered["exit_code"] == 0, recovered
    keys = [r["key"]["id"] for r in read_jsonl(tmp_path / "out")]
    assert {3, 4} <= set(keys)  # nothing lost; the failed batch may have been written twice
    assert keys[:2] == [1, 2]
    # The slot catches up once later batches commit.
    sql(url, "INSERT INTO t VALUES (5, 'e')")
    sql(url, "INSERT INTO t VALUES (6, 'f')")
    assert run_yaml(text)["exit_code"] == 0
    assert slot_confirmed(pg, "ack") > before_boom


def test_inspect_reads_snapshot_pages_and_uncommitted_changes(pg, run_yaml, tmp_path) -> None:
    """``inspect`` on a Postgres source: the poison change of the batch that stopped the pipeline comes
    from the slot, which inspect neither advances nor creates; a committed batch's changes are gone."""
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.inspect_batches import inspect_batch, inspect_batches
    from airflow_conduit.offsets import OffsetLog
    from airflow_conduit.state import PipelineState

    url = pg.create_database("pgsrc_inspect")
    text = picky_pipeline(url, "insp", tmp_path, "failsink_inspect")
    assert run_yaml(text)["exit_code"] == 0
    sql(url, "INSERT INTO t VALUES (2, 'b')")
    assert run_yaml(text)["exit_code"] == 0
    sql(url, "INSERT INTO t VALUES (3, 'boom')")
    (tmp_path / "fail").write_text("")
    assert run_yaml(text)["exit_code"] == 1

    def inspected(yaml_text: str) -> list:
        config = load_pipeline_text(yaml_text.replace("{tmp}", str(tmp_path)), "p.yaml").pipelines[0]
        state = PipelineState(tmp_path / "state", "pg-source")
        ids = OffsetLog.of(state).batch_ids()
        one_by_one = [inspect_batch(config, state, b) for b in ids]
        # A range shares one reader (one connection) across its batches, with the same answers.
        assert inspect_batches(config, state, ids[0], ids[-1]) == one_by_one
        return one_by_one

    confirmed = slot_confirmed(pg, "insp")
    batches = inspected(text)
    assert slot_confirmed(pg, "insp") == confirmed  # peeked, not consumed
    stuck = batches[-1]
    assert not stuck.committed and [b.committed for b in batches[:-1]] == [True] * (len(batches) - 1)
    assert [(r.record["operation"], r.record["payload"]["after"]) for r in stuck.records] == [
        ("create", {"id": 3, "v": "boom"})
    ]
    assert stuck.records[0].record["metadata"]["opencdc.collection"] == "t"
    assert [r.record["operation"] for r in batches[0].records] == ["snapshot"]
    assert batches[0].records[0].record["payload"]["after"] == {"id": 1, "v": "a"}
    # The committed batch with id 2: PostgreSQL released its changes when it committed.
    changes = [
        b
        for b in batches[:-1]
        if b.sources[0].end["phase"] == "cdc" and b.sources[0].start.get("lsn") != b.sources[0].end["lsn"]
    ]
    assert len(changes) == 1 and not changes[0].records
    assert "released" in changes[0].sources[0].unreadable

    # With a slot that does not exist, inspect creates none: the snapshot page is still read.
    gone = inspected(text.replace("slotName: insp", "slotName: nosuch"))
    assert [r.record["payload"]["after"] for r in gone[0].records] == [{"id": 1, "v": "a"}]
    assert "does not exist" in gone[-1].sources[0].unreadable and not gone[-1].records
    assert not pg.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'nosuch'")

    # The command line says it too; an unreachable server is a message, not a traceback.
    (tmp_path / "p.yaml").write_text(text.replace("{tmp}", str(tmp_path)))
    args = [sys.executable, "-m", "airflow_conduit.cli", "inspect", str(tmp_path / "p.yaml")]
    args += ["--state-dir", str(tmp_path / "state"), "--batch", str(changes[0].batch_id)]
    shown = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "not read again: PostgreSQL released these changes" in " ".join(shown.stdout.split())
    unreachable = text.replace(url, url.replace(f":{pg.port}/", f":{_free_port()}/"))
    (tmp_path / "p.yaml").write_text(unreachable.replace("{tmp}", str(tmp_path)))
    refused = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "cannot connect" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and "conduit-Pw-42" not in refused.stderr


def test_long_polling_reads_new_rows_as_creates(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgsrc_poll")
    pg.execute("CREATE ROLE poller LOGIN PASSWORD 'poll-Pw-9'")  # no REPLICATION: long polling needs none
    sql(
        url,
        "CREATE TABLE feed (id int PRIMARY KEY, seq bigint, v text)",
        "INSERT INTO feed VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 20, 'c')",
        "GRANT SELECT ON feed TO poller",
    )
    poller = url.replace("conduit:conduit-Pw-42", "poller:poll-Pw-9")
    text = pipeline(poller, "feed", extra="cdcMode: long_polling\norderingColumn: seq")
    first = run_yaml(text)
    assert first["exit_code"] == 0, first
    sql(url, "INSERT INTO feed VALUES (4, 30, 'd'), (5, 40, 'e')", "UPDATE feed SET v = 'x' WHERE id = 1")
    assert run_yaml(text)["records"]["read"] == 2
    records = read_jsonl(tmp_path / "out")
    assert [r["operation"] for r in records] == ["create"] * 5
    assert [r["key"]["id"] for r in records] == [1, 2, 3, 4, 5]  # equal seq values are not split or lost
    assert records[3]["payload"]["after"] == {"id": 4, "seq": 30, "v": "d"}
    assert not pg.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'conduitslot'")


def test_unreachable_server_is_transient(pg, run_yaml) -> None:
    url = f"postgresql://conduit:conduit-Pw-42@127.0.0.1:{_free_port()}/nothing"
    payload = run_yaml(pipeline(url, "t"))
    assert payload["exit_code"] == 75, payload
    assert payload["error"]["kind"] == "transient"
    assert payload["error"]["code"] == "source_failed"
    assert "conduit-Pw-42" not in json.dumps(payload)


def test_bad_password_is_fatal_and_never_shown(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgsrc_auth").replace("conduit-Pw-42", "wrong-Secret-77")
    payload = run_yaml(pipeline(url, "t"))
    assert payload["exit_code"] == 1, payload
    assert payload["error"]["code"] == "source_failed"
    assert "authentication failed" in payload["error"]["message"]
    for path in (tmp_path / "state").rglob("*.json*"):
        assert "wrong-Secret-77" not in path.read_text(), path
    assert "wrong-Secret-77" not in json.dumps(payload)


@pytest.mark.parametrize(
    ("case", "expected"),
    [("missing_table", "does not exist"), ("no_replication", "REPLICATION")],
)
def test_what_a_person_must_fix_is_fatal(pg, run_yaml, case: str, expected: str) -> None:
    url = pg.create_database(f"pgsrc_{case}")
    sql(url, "CREATE TABLE present (id int PRIMARY KEY)")
    tables = "absent" if case == "missing_table" else "present"
    if case == "no_replication":
        pg.execute("DROP ROLE IF EXISTS plain")
        pg.execute("CREATE ROLE plain LOGIN PASSWORD 'plain-Pw-1'")
        url = url.replace("conduit:conduit-Pw-42", "plain:plain-Pw-1")
    payload = run_yaml(pipeline(url, tables, slot=case))
    assert payload["exit_code"] == 1, payload
    assert payload["error"]["kind"] == "fatal" and payload["error"]["code"] == "source_failed"
    assert expected in payload["error"]["message"]


def test_snapshot_mode_never_reads_only_changes(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgsrc_never")
    sql(
        url, "CREATE TABLE t (a int, b int, v text, PRIMARY KEY (a, b))", "INSERT INTO t VALUES (1, 1, 'old')"
    )
    text = pipeline(url, "t", slot="never", extra="snapshotMode: never")
    first = run_yaml(text)  # a composite key is fine without a snapshot to page
    assert first["exit_code"] == 0 and first["records"]["read"] == 0, first
    sql(url, "INSERT INTO t VALUES (2, 3, 'new')")
    assert run_yaml(text)["records"]["read"] == 1
    [record] = read_jsonl(tmp_path / "out")
    assert record["operation"] == "create" and record["key"] == {"a": 2, "b": 3}
