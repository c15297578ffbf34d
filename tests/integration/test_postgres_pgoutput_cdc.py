"""``builtin:postgres`` source with ``pgoutput`` (Conduit's plugin), against a real PostgreSQL 15: the
publication ``logrepl.publicationName`` created as Conduit does, changes of several tables with typed
values and REPLICA IDENTITY FULL before-images, restarts (graceful and SIGKILL) that resume from the
committed position, and ``test_decoding`` slots of earlier releases kept."""

from __future__ import annotations

import sys

from tests.conftest import read_jsonl
from tests.integration.test_postgres_source import sql

CLI = [sys.executable, "-m", "airflow_conduit.cli"]

# Only settings Conduit's postgres connector documents.
CONDUIT_FILE = """
version: "2.2"
pipelines:
  - id: pgo
    status: running
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings:
          url: "{url}"
          tables: "{tables}"
          cdcMode: logrepl
          snapshotMode: {snapshot}
          logrepl.publicationName: {publication}
          logrepl.slotName: {slot}
          logrepl.autoCleanup: "false"
          logrepl.withAvroSchema: "false"
          snapshot.fetchSize: 2
{extra}      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: "{out}"
"""


def conduit_file(
    url: str,
    tables: str,
    slot: str,
    out: str = "{tmp}/out",
    publication: str = "conduitpub",
    snapshot: str = "initial",
    extra: str = "",
) -> str:
    lines = "".join(f"          {line}\n" for line in extra.splitlines() if line.strip())
    return CONDUIT_FILE.format(
        url=url, tables=tables, slot=slot, out=out, publication=publication, snapshot=snapshot, extra=lines
    )


def changes(records: list[dict]) -> list[tuple]:
    return [(r["operation"], r["metadata"]["opencdc.collection"], r["key"]) for r in records]


def test_publication_created_and_typed_changes_of_several_tables(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgo_types")
    sql(
        url,
        "CREATE TABLE typed (id int PRIMARY KEY, big bigint, num numeric, txt text, ok bool, "
        "at timestamp, doc jsonb, note text)",
        "ALTER TABLE typed REPLICA IDENTITY FULL",
        "CREATE TABLE plain (id int PRIMARY KEY, v text)",
        "CREATE TABLE elsewhere (id int PRIMARY KEY)",
        "INSERT INTO plain VALUES (1, 'before the pipeline')",
    )
    text = conduit_file(url, "typed,plain", "pgo_types", publication="MyPub")
    first = run_yaml(text)
    assert first["exit_code"] == 0, first
    # As Conduit: the publication for exactly the configured tables, then a pgoutput slot.
    published = pg.execute(
        "SELECT tablename::text FROM pg_publication_tables WHERE pubname = 'MyPub' ORDER BY 1", "pgo_types"
    )
    assert published == [("plain",), ("typed",)]
    assert pg.execute("SELECT plugin::text FROM pg_replication_slots WHERE slot_name = 'pgo_types'") == [
        ("pgoutput",)
    ]
    assert changes(read_jsonl(tmp_path / "out")) == [("snapshot", "plain", {"id": 1})]

    sql(
        url,
        "INSERT INTO typed VALUES (1, 9007199254740993, 12.50, 'it''s', true, '2024-01-02 03:04:05', "
        "'{\"a\": [1, 2]}', NULL)",
        "INSERT INTO elsewhere VALUES (1)",
        "UPDATE plain SET v = 'changed' WHERE id = 1",
        "UPDATE typed SET txt = 'new', note = 'n' WHERE id = 1",
        "BEGIN; INSERT INTO plain VALUES (2, NULL); DELETE FROM plain WHERE id = 1; COMMIT",
        "DELETE FROM typed WHERE id = 1",
    )
    second = run_yaml(text)
    assert second["exit_code"] == 0, second
    records = read_jsonl(tmp_path / "out")[1:]
    assert changes(records) == [
        ("create", "typed", {"id": 1}),
        ("update", "plain", {"id": 1}),
        ("update", "typed", {"id": 1}),
        ("create", "plain", {"id": 2}),
        ("delete", "plain", {"id": 1}),
        ("delete", "typed", {"id": 1}),
    ]
    row = {
        "id": 1,
        "big": 9007199254740993,
        "num": 12.5,
        "txt": "it's",
        "ok": True,
        "at": "2024-01-02 03:04:05",
        "doc": {"a": [1, 2]},
        "note": None,
    }
    changed = {**row, "txt": "new", "note": "n"}
    assert records[0]["payload"] == {"before": None, "after": row}
    # Default replica identity: no before-image of an update, only the key of a deleted row.
    assert records[1]["payload"] == {"before": None, "after": {"id": 1, "v": "changed"}}
    assert records[4]["payload"] == {"before": {"id": 1}, "after": None}
    # REPLICA IDENTITY FULL: the whole old row.
    assert records[2]["payload"] == {"before": row, "after": changed}
    assert records[5]["payload"] == {"before": changed, "after": None}
    assert records[3]["payload"]["after"] == {"id": 2, "v": None}
    assert all(r["metadata"]["opencdc.collection"] in ("typed", "plain") for r in records)
    positions = [r["position"] for r in records]
    assert len(set(positions)) == len(positions)


def test_an_existing_publication_is_used_and_must_publish_every_table(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgo_pub")
    sql(url, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)")
    sql(url, "CREATE PUBLICATION only_a FOR TABLE a")
    refused = run_yaml(conduit_file(url, "a,b", "pgo_pub", publication="only_a"))
    assert refused["exit_code"] == 1, refused
    assert refused["error"]["kind"] == "fatal" and "does not publish b" in refused["error"]["message"]
    assert pg.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pgo_pub'") == [(0,)]

    sql(url, "ALTER PUBLICATION only_a ADD TABLE b")
    assert run_yaml(conduit_file(url, "a,b", "pgo_pub", publication="only_a"))["exit_code"] == 0
    sql(url, "INSERT INTO b VALUES (5)", "INSERT INTO a VALUES (6)")
    payload = run_yaml(conduit_file(url, "a,b", "pgo_pub", publication="only_a"))
    assert payload["exit_code"] == 0, payload
    assert changes(read_jsonl(tmp_path / "out")) == [("create", "b", {"id": 5}), ("create", "a", {"id": 6})]


def test_a_test_decoding_slot_of_an_earlier_release_is_kept(pg, run_yaml, tmp_path) -> None:
    url = pg.create_database("pgo_legacy")
    sql(url, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    sql(url, "SELECT pg_create_logical_replication_slot('legacy', 'test_decoding')")
    text = conduit_file(url, "t", "legacy", snapshot="never")
    assert run_yaml(text)["exit_code"] == 0
    sql(url, "INSERT INTO t VALUES (1, 'a')", "UPDATE t SET v = 'b' WHERE id = 1")
    payload = run_yaml(text)
    assert payload["exit_code"] == 0, payload
    assert changes(read_jsonl(tmp_path / "out")) == [("create", "t", {"id": 1}), ("update", "t", {"id": 1})]
    assert pg.execute("SELECT plugin::text FROM pg_replication_slots WHERE slot_name = 'legacy'") == [
        ("test_decoding",)
    ]
    # Asking for pgoutput on that slot is an error a person must fix.
    wrong = run_yaml(conduit_file(url, "t", "legacy", snapshot="never", extra="logrepl.plugin: pgoutput"))
    assert wrong["exit_code"] == 1 and "uses plugin 'test_decoding'" in wrong["error"]["message"], wrong
