"""``builtin:postgres`` destination against a real PostgreSQL cluster and real Spark."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from typing import Any

import pytest
from pgcluster import APP_PASSWORD, APP_USER

from airflow_conduit.config.settings import PostgresDestinationSettings
from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.connectors.postgres import destination, staging
from airflow_conduit.errors import FatalError, TransientError

pg_settings = PostgresDestinationSettings.model_validate  # validated, as the engine gets them

pytestmark = pytest.mark.spark


@pytest.fixture
def db(pg) -> str:
    """A fresh database (owned by the app user) per test; its app-user URL."""
    return pg.create_database(f"t_{uuid.uuid4().hex[:10]}")


def dbname(url: str) -> str:
    return url.rsplit("/", 1)[1]


def rows(pg, url: str, sql: str) -> list[tuple]:
    return pg.execute(sql, dbname(url))


def record(
    op: str = "create",
    after: Any = None,
    *,
    key: Any = None,
    before: Any = None,
    collection: str | None = None,
    after_raw: bytes | None = None,
    key_raw: bytes | None = None,
) -> tuple:
    metadata = {"opencdc.collection": collection} if collection else {}
    dump = lambda v: None if v is None else json.dumps(v)  # noqa: E731
    return (b"p", op, metadata, dump(key), key_raw, dump(before), None, dump(after), after_raw)


def frame(spark, records: list[tuple], *, scattered: bool = False):
    """Records in the engine's form (structured data as VARIANT) with ``_seq`` in list order over three
    partitions, as the engine numbers a micro-batch: partition by partition, so partition order is
    source order. ``scattered`` deals them out over two partitions regardless of order instead."""
    schema = (
        "position binary, operation string, metadata map<string,string>, key_json string, key_raw binary, "
        "before_json string, before_raw binary, after_json string, after_raw binary, _seq bigint"
    )
    data = [(*r, i * 10) for i, r in enumerate(records)]
    rows = spark.createDataFrame(data, schema, verifySchema=False)
    if scattered:
        rows = rows.repartition(2)
    else:
        rows = rows.repartitionByRange(3, "_seq").sortWithinPartitions("_seq")
    return rows.selectExpr(
        "position",
        "operation",
        "metadata",
        "parse_json(key_json) AS key",
        "key_raw",
        "parse_json(before_json) AS before",
        "before_raw",
        "parse_json(after_json) AS after",
        "after_raw",
        "_seq",
    )


def delivery(hash_: str = "h1", pipeline: str = "p", dest: str = "out", batch: int = 0) -> Delivery:
    return Delivery(pipeline, dest, batch, "gen", hash_)


def write(spark, records, settings, dlv=None, publish=True, scattered=False):
    staged = destination.stage(frame(spark, records, scattered=scattered), settings, dlv or delivery())
    if publish:
        staged.publish()
    else:
        staged.discard()
    return staged


def staging_tables(pg, url: str) -> list[tuple]:
    return rows(pg, url, "SELECT tablename FROM pg_tables WHERE tablename LIKE '\\_conduit\\_stage%'")


# --- writing ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_array", [True, False], ids=["set-wise", "copy"])
def test_column_types_from_json(spark, pg, db, with_array, caplog):
    """Without the array column the batch is COPY-ed straight into the table; with it, it is applied
    set-wise from the staging table (arrays come as JSON, which COPY cannot read). Same values."""
    rows(
        pg,
        db,
        "CREATE TABLE typed (id int, price numeric(6,2), at timestamptz, tags int[], doc jsonb, j json, "
        f"flag boolean, code char(2), big bigint GENERATED ALWAYS AS (id * 2) STORED); ALTER TABLE typed OWNER TO {APP_USER}",
    )
    after = {
        "id": 1,
        "price": 12.345,
        "at": "2026-01-02T03:04:05Z",
        "tags": [3, 4],
        "doc": {"a": [1, {"b": None}]},
        "j": "text",
        "flag": True,
        "code": "ab",
    }
    if not with_array:
        del after["tags"]
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        staged = write(
            spark,
            [record(after=after), record(after={"id": 2, "doc": None})],
            pg_settings({"url": db, "table": "typed"}),
        )
    assert (destination.APPLIED if with_array else destination.COPIED) in caplog.text
    assert staged.nacks == []
    got = rows(
        pg,
        db,
        "SELECT id, price::text, at = '2026-01-02T03:04:05Z', tags, doc, j::text, flag, code, big FROM typed ORDER BY id",
    )
    assert got == [
        (1, "12.35", True, [3, 4] if with_array else None, {"a": [1, {"b": None}]}, '"text"', True, "ab", 2),
        (2, None, None, None, None, None, None, None, 4),
    ]


def test_text_values_arrive_exactly(spark, pg, db):
    """Strings reach a text column unquoted and unescaped, whatever they hold; other JSON values as
    their JSON text; an empty string stays distinct from NULL."""
    rows(pg, db, f"CREATE TABLE notes (id int, t text, f float8); ALTER TABLE notes OWNER TO {APP_USER}")
    texts = [
        "plain",
        'with "quotes"',
        "back\\slash",
        "new\nline\ttab",
        "unicode é ✓ 😀",
        "",
        "null",
        "comma, and ; semicolon",
        42,
        {"a": [1, "x"]},
        None,
    ]
    records = [
        record(after={"id": i, "t": text, "f": 1e20 if i == 0 else i / 3}) for i, text in enumerate(texts)
    ]
    staged = write(spark, records, pg_settings({"url": db, "table": "notes"}))
    assert staged.nacks == []
    got = rows(pg, db, "SELECT t, f FROM notes ORDER BY id")
    # Every string exactly as sent; the number and the object as their JSON text.
    assert [r[0] for r in got] == [*texts[:8], "42", '{"a":[1,"x"]}', None]
    assert [r[1] for r in got] == [1e20, *(i / 3 for i in range(1, len(texts)))]


def test_insert_without_key_in_source_order(spark, pg, db, caplog):
    rows(pg, db, "CREATE TABLE items (id serial PRIMARY KEY, name text, qty int, note text DEFAULT 'dflt')")
    rows(pg, db, f"ALTER TABLE items OWNER TO {APP_USER}")
    records = [record(after={"name": f"n{i}", "qty": i}) for i in range(7)]
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        staged = write(spark, records, pg_settings({"url": db, "table": "items"}))
    # The destination logs where it wrote, never the password.
    assert "conduit:***@127.0.0.1" in caplog.text and "7 rows affected" in caplog.text
    assert destination.COPIED in caplog.text
    assert APP_PASSWORD not in caplog.text
    assert staged.nacks == []
    got = rows(pg, db, "SELECT id, name, qty, note FROM items ORDER BY id")
    # Source order survives the two-partition COPY; a column no record sets keeps its default.
    assert [(r[1], r[2], r[3]) for r in got] == [(f"n{i}", i, "dflt") for i in range(7)]
    assert staging_tables(pg, db) == []
    marker = rows(
        pg, db, "SELECT pipeline_id, destination_id, delivery_hash, batch_id FROM _conduit_deliveries"
    )
    assert marker == [("p", "out", "h1", 0)]


def test_insert_copy_gives_way_when_partitions_come_out_of_source_order(spark, pg, db, caplog):
    """Partitions that do not follow source order cannot be COPY-ed as they arrive: the whole batch is
    then sorted and COPY-ed, still in source order."""
    rows(
        pg,
        db,
        f"CREATE TABLE items (id serial PRIMARY KEY, name text); ALTER TABLE items OWNER TO {APP_USER}",
    )
    records = [record(after={"name": f"n{i}"}) for i in range(40)]
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        staged = write(spark, records, pg_settings({"url": db, "table": "items"}), scattered=True)
    assert destination.COPIED in caplog.text and "40 rows affected" in caplog.text
    assert staged.nacks == []
    assert rows(pg, db, "SELECT name FROM items ORDER BY id") == [(f"n{i}",) for i in range(40)]


def test_insert_copy_gives_way_when_a_later_partition_sets_another_column(spark, pg, db, caplog):
    """The COPY names the columns the first rows set. A later partition that sets one more gives way to
    one COPY of the whole batch with every column some record sets: the others get NULL there, a column
    no record sets keeps its default, and source order holds."""
    rows(
        pg,
        db,
        "CREATE TABLE items (id serial PRIMARY KEY, name text, qty int DEFAULT 7, note text DEFAULT 'dflt'); "
        f"ALTER TABLE items OWNER TO {APP_USER}",
    )
    records = [record(after={"name": f"n{i}"}) for i in range(30)]
    records[25] = record(after={"name": "n25", "qty": 25})  # in the last of the three partitions
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        staged = write(spark, records, pg_settings({"url": db, "table": "items"}))
    assert destination.COPIED in caplog.text and "30 rows affected" in caplog.text
    assert staged.nacks == []
    got = rows(pg, db, "SELECT name, qty, note FROM items ORDER BY id")
    assert got == [(f"n{i}", 25 if i == 25 else None, "dflt") for i in range(30)]


def test_a_field_set_to_null_writes_null_not_the_default(spark, pg, db):
    """A JSON null sets its column (NULL), while a column no record names keeps its default."""
    rows(
        pg,
        db,
        "CREATE TABLE n (id serial PRIMARY KEY, note text DEFAULT 'dflt', qty int, tag text DEFAULT 'd2'); "
        f"ALTER TABLE n OWNER TO {APP_USER}",
    )
    staged = write(
        spark,
        [record(after={"note": None, "qty": 1}), record(after={"qty": 2})],
        pg_settings({"url": db, "table": "n"}),
    )
    assert staged.nacks == []
    assert rows(pg, db, "SELECT note, qty, tag FROM n ORDER BY id") == [(None, 1, "d2"), (None, 2, "d2")]


def test_upsert_and_delete_by_key_last_operation_wins(spark, pg, db, caplog):
    rows(
        pg,
        db,
        f"CREATE TABLE users (id int PRIMARY KEY, name text, age int); ALTER TABLE users OWNER TO {APP_USER}",
    )
    rows(pg, db, "INSERT INTO users VALUES (1, 'old1', 10), (2, 'old2', 20), (3, 'old3', 30)")
    settings = pg_settings({"url": db, "table": "users", "key": "id"})
    records = [
        record("update", {"id": 1, "name": "new1", "age": 11}),  # existing row updated
        record("delete", key={"id": 2}),  # existing row deleted by .Key
        record("create", {"id": 4, "name": "four", "age": 40}),
        record("update", {"id": 4, "name": "four-b", "age": 41}),
        record("delete", None, before={"id": 4, "name": "x"}),  # key from .Payload.Before
        record("create", {"id": 4, "name": "four-c", "age": 42}),  # last wins: exists again
        record("create", {"id": 5, "name": "five", "age": 50}),
        record("update", {"name": "five-b", "age": 51}, key={"id": 5}),  # key from .Key, not in After
        record("snapshot", {"id": 6, "name": "six", "age": 60}),
        record("delete", key={"id": 6}),  # last wins: gone
        record("update", {"id": 3, "name": "new3", "age": 31}),
        record("update", {"id": 3, "name": "newer3", "age": 32}),
    ]
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        staged = write(spark, records, settings)
    # A COPY cannot upsert existing keys nor delete: the staging table, and for the rest of the run.
    assert destination.APPLIED in caplog.text
    assert "upserts go through the staging table from now on" in caplog.text
    assert "error ignored" not in caplog.text  # psycopg's warning when a COPY is ended by an exception
    assert staged.nacks == []
    assert rows(pg, db, "SELECT id, name, age FROM users ORDER BY id") == [
        (1, "new1", 11),
        (3, "newer3", 32),
        (4, "four-c", 42),
        (5, "five-b", 51),
    ]


def test_upserts_of_new_keys_are_copied_until_a_key_exists(spark, pg, db, caplog):
    """While every key is new an upsert is an insert: the batch is COPY-ed straight into the table. The
    first batch that meets a key already there is refused by the unique index and upserted through the
    staging table, and so is every later batch of that destination, without another COPY."""
    rows(
        pg,
        db,
        f"CREATE TABLE kv (k text PRIMARY KEY, v int, note text DEFAULT 'd'); ALTER TABLE kv OWNER TO {APP_USER}",
    )
    settings = pg_settings({"url": db, "table": "kv", "key": "k"})
    first = [record("snapshot", {"k": f"k{i}", "v": i}) for i in range(20)]
    first[7] = record("create", {"v": 7}, key={"k": "k7"})  # the key from .Key only
    second = [record("update", {"k": f"k{i}", "v": 100 + i}) for i in range(15, 25)]  # k15..k19 exist
    third = [record("update", {"k": "k0", "v": -1}), record("create", {"k": "new", "v": 1})]
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        write(spark, first, settings, delivery("u1", batch=0))
        assert destination.COPIED in caplog.text and destination.APPLIED not in caplog.text
        caplog.clear()
        for number, batch in enumerate([second, third], start=1):
            assert write(spark, batch, settings, delivery(f"u{number + 1}", batch=number)).nacks == []
    assert destination.COPIED not in caplog.text
    assert caplog.text.count(destination.APPLIED) == 2
    assert caplog.text.count("upserts go through the staging table") == 1
    assert "error ignored" not in caplog.text
    got = dict(rows(pg, db, "SELECT k, v FROM kv"))
    expected = {f"k{i}": i for i in range(15)} | {f"k{i}": 100 + i for i in range(15, 25)}
    assert got == expected | {"k0": -1, "new": 1}
    assert rows(pg, db, "SELECT DISTINCT note FROM kv") == [("d",)]


def test_table_from_collection_several_tables_in_one_batch(spark, pg, db):
    rows(
        pg, db, f"CREATE TABLE orders (id int PRIMARY KEY, total int); ALTER TABLE orders OWNER TO {APP_USER}"
    )
    rows(
        pg,
        db,
        f"CREATE TABLE refunds (id int PRIMARY KEY, total int); ALTER TABLE refunds OWNER TO {APP_USER}",
    )
    records = [
        record(after={"id": 1, "total": 10}, collection="orders"),
        record(after={"id": 2, "total": 20}, collection="refunds"),
        record(after={"id": 3, "total": 30}, collection="orders"),
        record(after={"id": 4, "total": 40}, collection=None),  # nowhere to go: nacked
        record(after={"id": 5, "nope": 50}, collection="refunds"),  # no such column: nacked
    ]
    staged = write(spark, records, pg_settings({"url": db, "key": "id"}))
    assert rows(pg, db, "SELECT id, total FROM orders ORDER BY id") == [(1, 10), (3, 30)]
    assert rows(pg, db, "SELECT id, total FROM refunds ORDER BY id") == [(2, 20)]
    assert [seq for seq, _ in staged.nacks] == [30, 40]
    assert "no target table" in staged.nacks[0][1]
    assert 'column "nope" of relation "refunds" does not exist' in staged.nacks[1][1]


def test_replayed_delivery_is_skipped(spark, pg, db):
    rows(pg, db, f"CREATE TABLE log (id serial PRIMARY KEY, msg text); ALTER TABLE log OWNER TO {APP_USER}")
    settings = pg_settings({"url": db, "table": "log"})
    records = [record(after={"msg": f"m{i}"}) for i in range(5)]
    assert not destination.delivered(settings, delivery("h1"))  # no marker table yet
    write(spark, records, settings, delivery("h1"))
    assert destination.delivered(settings, delivery("h1"))
    assert not destination.delivered(settings, delivery("h2"))
    assert not destination.delivered(settings, delivery("h1", dest="other"))
    # A second run that raced past delivered() finds the hash under the marker's lock: writes nothing.
    again = write(spark, records, settings, delivery("h1"))
    assert again.applied == 0
    assert rows(pg, db, "SELECT count(*) FROM log") == [(5,)]
    # The next batch is written, and the marker moves on.
    write(spark, records[:2], settings, delivery("h2", batch=1))
    assert rows(pg, db, "SELECT count(*) FROM log") == [(7,)]
    assert rows(pg, db, "SELECT delivery_hash, batch_id FROM _conduit_deliveries") == [("h2", 1)]
    assert staging_tables(pg, db) == []


def test_discard_leaves_nothing(spark, pg, db):
    rows(pg, db, f"CREATE TABLE t (id int PRIMARY KEY, v text); ALTER TABLE t OWNER TO {APP_USER}")
    rows(pg, db, "INSERT INTO t VALUES (1, 'keep')")
    settings = pg_settings({"url": db, "table": "t", "key": "id"})
    records = [record("update", {"id": 1, "v": "changed"}), record("create", {"id": 2, "v": "new"})]
    write(spark, records, settings, delivery("h9"), publish=False)
    assert rows(pg, db, "SELECT id, v FROM t ORDER BY id") == [(1, "keep")]
    assert not destination.delivered(settings, delivery("h9"))
    assert rows(pg, db, "SELECT delivery_hash FROM _conduit_deliveries") == []
    assert staging_tables(pg, db) == []


@pytest.mark.parametrize("key", ["id", ""], ids=["upsert", "insert"])
def test_poison_records_are_nacked_and_the_rest_delivered(spark, pg, db, key, caplog):
    """Upserts bisect the set-wise apply; inserts first try one COPY into the table, which PostgreSQL
    refuses as a whole, and then take the same path."""
    rows(
        pg,
        db,
        "CREATE TABLE pay (id int PRIMARY KEY, amount int NOT NULL CHECK (amount >= 0), code varchar(3)); "
        f"ALTER TABLE pay OWNER TO {APP_USER}",
    )
    settings = pg_settings({"url": db, "table": "pay", "key": key})
    records = [record(after={"id": i, "amount": i * 10, "code": "ok"}) for i in range(40)]  # seq = 10 * index
    records[3] = record(after={"id": 3, "amount": -5, "code": "ok"})  # CHECK violation
    records[17] = record(after={"id": 17, "amount": None, "code": "ok"})  # NOT NULL violation
    records[25] = record(after={"id": 25, "amount": "lots", "code": "ok"})  # not an integer
    records[33] = record(after={"id": 33, "amount": 1, "code": "toolong"})  # too long for varchar(3)
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        staged = write(spark, records, settings, delivery("hp"))
    assert destination.APPLIED in caplog.text
    nacked = dict(staged.nacks)
    assert sorted(nacked) == [30, 170, 250, 330]
    assert all(message.startswith("postgres: ") for message in nacked.values())
    assert "check constraint" in nacked[30]
    assert "not-null" in nacked[170] or "null value" in nacked[170]
    assert "integer" in nacked[250]
    assert "too long" in nacked[330]
    got = rows(pg, db, "SELECT id FROM pay ORDER BY id")
    assert [r[0] for r in got] == [i for i in range(40) if i not in (3, 17, 25, 33)]
    assert destination.delivered(settings, delivery("hp"))


@pytest.mark.parametrize("nack_limit", [None, 0, 2], ids=["unlimited", "first-nack-fatal", "two"])
def test_the_search_for_refused_records_stops_past_the_nack_limit(spark, pg, db, nack_limit, caplog):
    """A DLQ window that takes no nack makes the first refused record fatal: the bisection stops there
    instead of searching the whole batch. The records it found are the earliest, as the window counts."""
    rows(
        pg,
        db,
        f"CREATE TABLE pay (id int PRIMARY KEY, amount int CHECK (amount >= 0)); ALTER TABLE pay OWNER TO {APP_USER}",
    )
    poison = [3, 17, 25, 33]
    records = [record(after={"id": i, "amount": -1 if i in poison else i}) for i in range(40)]
    dlv = Delivery("p", "out", 0, "gen", "hl", nack_limit=nack_limit)
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        staged = destination.stage(frame(spark, records), pg_settings({"url": db, "table": "pay"}), dlv)
    try:
        found = poison if nack_limit is None else poison[: nack_limit + 1]
        assert [seq for seq, _ in staged.nacks] == [i * 10 for i in found]
        assert all("check constraint" in message for _, message in staged.nacks)
        assert ("stopped looking after" in caplog.text) == (nack_limit is not None)
        # The parts are found through an index on the staging table's seq (not a scan of the batch each).
        indexes = staged.conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (destination.STAGING_TABLE,)
        ).fetchall()
        assert [i for (i,) in indexes if "(seq)" in i], indexes
    finally:
        staged.discard()
    assert rows(pg, db, "SELECT count(*) FROM pay") == [(0,)]


def test_too_long_key_is_refused_not_cut(spark, pg, db):
    rows(pg, db, f"CREATE TABLE c (code varchar(3) PRIMARY KEY, v int); ALTER TABLE c OWNER TO {APP_USER}")
    settings = pg_settings({"url": db, "table": "c", "key": "code"})
    records = [record(after={"code": "abc", "v": 1}), record("update", {"code": "abcd", "v": 2})]
    staged = write(spark, records, settings)
    assert [seq for seq, _ in staged.nacks] == [10]
    assert "too long" in staged.nacks[0][1]
    assert rows(pg, db, "SELECT code, v FROM c") == [("abc", 1)]


def test_records_that_cannot_be_mapped_are_nacked(spark, pg, db):
    rows(pg, db, f"CREATE TABLE t (id serial PRIMARY KEY, v text); ALTER TABLE t OWNER TO {APP_USER}")
    settings = pg_settings({"url": db, "table": "t"})
    records = [
        record(after={"v": "a"}),
        record(after_raw=b'{"v": "raw"}'),  # raw payload
        record("update", {"v": "u"}),  # update without `key`
        record("delete", key={"id": 1}),  # delete without `key`
        record(after={"v": "b", "nope": 1}),  # no such column
        record(after={"v": "c"}),
        record(after=["v", "d"]),  # not an object: names no column
    ]
    staged = write(spark, records, settings)
    nacked = dict(staged.nacks)
    assert sorted(nacked) == [10, 20, 30, 40, 60]
    assert "not an object" in nacked[60]
    assert "raw data" in nacked[10]
    assert "without the `key` setting" in nacked[20] and "update" in nacked[20]
    assert "without the `key` setting" in nacked[30] and "delete" in nacked[30]
    assert 'column "nope"' in nacked[40]
    assert rows(pg, db, "SELECT v FROM t ORDER BY id") == [("a",), ("c",)]


# --- errors -----------------------------------------------------------------------------------------------


def test_a_batch_too_large_for_the_driver_is_fatal_and_says_what_to_change(spark, pg, db, monkeypatch):
    """The driver collects each micro-batch; Spark refuses one past spark.driver.maxResultSize. A
    session with a tiny limit would need its own JVM, so Spark's refusal is injected."""
    rows(pg, db, f"CREATE TABLE t (id int); ALTER TABLE t OWNER TO {APP_USER}")

    def too_large(frame):
        raise RuntimeError(
            "Job aborted due to stage failure: Total size of serialized results of 2 tasks (1100.0 MiB) "
            "is bigger than spark.driver.maxResultSize (1024.0 MiB)"
        )

    monkeypatch.setattr(staging, "_arrow_batches", too_large)
    with pytest.raises(FatalError) as caught:
        write(spark, [record(after={"id": 1})], pg_settings({"url": db, "table": "t"}))
    assert "lower the source's maxRecordsPerBatch" in str(caught.value)
    assert rows(pg, db, "SELECT count(*) FROM t") == [(0,)]


def test_a_failure_while_rows_stream_in_writes_nothing_and_leaves_spark_usable(spark, pg, db, monkeypatch):
    """The driver COPYs partitions while Spark computes the rest. A failure half way (injected: the
    second partition's CSV) rolls everything back, closes Spark's stream, and the next batch writes."""
    rows(pg, db, f"CREATE TABLE t (id int, v text); ALTER TABLE t OWNER TO {APP_USER}")
    settings = pg_settings({"url": db, "table": "t"})
    records = [record(after={"id": i, "v": f"v{i}"}) for i in range(30)]
    calls = []

    def fail_on_second(rows_, columns):
        calls.append(rows_.num_rows)
        if len(calls) == 2:
            raise RuntimeError("injected failure")
        return csv_rows(rows_, columns)

    csv_rows = destination.csv_rows
    monkeypatch.setattr(destination, "csv_rows", fail_on_second)
    with pytest.raises(RuntimeError, match="injected failure"):
        write(spark, records, settings, delivery("hf"))
    assert rows(pg, db, "SELECT count(*) FROM t") == [(0,)]
    assert not destination.delivered(settings, delivery("hf"))
    monkeypatch.setattr(destination, "csv_rows", csv_rows)
    assert write(spark, records, settings, delivery("hf")).nacks == []
    assert rows(pg, db, "SELECT count(*) FROM t") == [(30,)]


def test_missing_table_is_fatal_and_names_it(spark, pg, db):
    with pytest.raises(FatalError) as caught:
        write(spark, [record(after={"id": 1})], pg_settings({"url": db, "table": "no_such_table"}))
    assert "no_such_table" in str(caught.value)
    assert APP_PASSWORD not in str(caught.value)
    assert staging_tables(pg, db) == []


def test_bad_password_is_fatal_and_never_shows_the_password(spark, pg, db):
    wrong = "Wr0ng-Secret-77"
    url = db.replace(APP_PASSWORD, wrong)
    settings = pg_settings({"url": url, "table": "t"})
    with pytest.raises(FatalError) as staged:
        write(spark, [record(after={"id": 1})], settings)
    with pytest.raises(FatalError) as checked:
        destination.delivered(settings, delivery())
    for error in (staged.value, checked.value):
        assert wrong not in str(error)
        assert "password" in str(error)  # says what to fix


def test_server_stopped_is_transient(spark, pg, db):
    settings = pg_settings({"url": db, "table": "t"})
    pg.stop()
    try:
        with pytest.raises(TransientError) as checked:
            destination.delivered(settings, delivery())
        with pytest.raises(TransientError) as staged:
            write(spark, [record(after={"id": 1})], settings)
    finally:
        pg.start()
    for error in (checked.value, staged.value):
        assert APP_PASSWORD not in str(error)


def test_server_lost_before_publish_leaves_the_batch_undelivered(spark, pg, db):
    rows(pg, db, f"CREATE TABLE t (id int PRIMARY KEY); ALTER TABLE t OWNER TO {APP_USER}")
    settings = pg_settings({"url": db, "table": "t", "key": "id"})
    staged = destination.stage(frame(spark, [record(after={"id": 1})]), settings, delivery("hx"))
    pg.stop()
    try:
        with pytest.raises(TransientError) as caught:
            staged.publish()
    finally:
        pg.start()
    assert APP_PASSWORD not in str(caught.value)
    # The commit never happened: neither data nor marker, so a replay writes the batch.
    assert rows(pg, db, "SELECT count(*) FROM t") == [(0,)]
    assert not destination.delivered(settings, delivery("hx"))
    write(spark, [record(after={"id": 1})], settings, delivery("hx"))
    assert rows(pg, db, "SELECT count(*) FROM t") == [(1,)]
    assert staging_tables(pg, db) == []


# --- end to end through the engine --------------------------------------------------------------------------


PIPELINE = """
version: "2.2"
pipelines:
  - id: pg-e2e
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: 300
          maxRecordsPerBatch: 100
          collections: orders
          format.type: structured
          format.options.name: string
          format.options.amount: int
      - id: db
        type: destination
        plugin: builtin:postgres
        settings:
          url: {url}
          key: "{key}"
"""


def test_pipeline_end_to_end_exactly_once_on_replay(pg, db, run_yaml, tmp_path):
    # No key: plain inserts, so a batch written twice would show as duplicate rows.
    rows(
        pg,
        db,
        f"CREATE TABLE orders (n serial PRIMARY KEY, name text, amount int); ALTER TABLE orders OWNER TO {APP_USER}",
    )
    text = PIPELINE.replace("{url}", db).replace("{key}", "")
    state = tmp_path / "state"
    payload = run_yaml(text, state_dir=state)
    assert payload["exit_code"] == 0, payload
    assert APP_PASSWORD not in json.dumps(payload)
    assert payload["records"]["written"] == {"pg-e2e:db": 300}
    assert rows(pg, db, "SELECT count(*), count(DISTINCT name || amount) > 1 FROM orders") == [(300, True)]
    # A crash after PostgreSQL committed the last batch but before Spark's commit log did: Spark replays
    # the batch with the same offsets (same delivery hash), and the destination skips it.
    commits = state / "pg-e2e" / "checkpoint" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    shutil.rmtree(commits / f".{last}.crc", ignore_errors=True)
    (commits / f".{last}.crc").unlink(missing_ok=True)
    again = run_yaml(text, state_dir=state)
    assert again["exit_code"] == 0, again
    assert rows(pg, db, "SELECT count(*) FROM orders") == [(300,)]
    audit = (state / "pg-e2e" / "audit.jsonl").read_text()
    assert "delivery_skipped" in audit


def test_pipeline_end_to_end_fatal_error_in_exit_payload(pg, db, run_yaml):
    text = PIPELINE.replace("{url}", db).replace("{key}", "id")
    payload = run_yaml(text)  # no table `orders`
    assert payload["exit_code"] == 1, payload
    assert payload["error"]["kind"] == "fatal"
    assert "orders" in payload["error"]["message"]
    assert APP_PASSWORD not in json.dumps(payload)


def test_pipeline_end_to_end_poison_records_go_to_the_dlq(pg, db, run_yaml, tmp_path):
    rows(
        pg,
        db,
        "CREATE TABLE orders (id int PRIMARY KEY, name text, amount int CHECK (amount < 900000)); "
        f"ALTER TABLE orders OWNER TO {APP_USER}",
    )
    text = PIPELINE.replace("{url}", db).replace("{key}", "id") + (
        "    dead-letter-queue:\n      plugin: builtin:log\n      window-size: 0\n"
    )
    payload = run_yaml(text, state_dir=tmp_path / "state")
    assert payload["exit_code"] == 0, payload
    written = rows(pg, db, "SELECT count(*), max(amount) < 900000 FROM orders")[0]
    nacked = payload["records"]["nacked"]
    assert nacked > 0 and written == (300 - nacked, True)
    assert payload["records"]["dlq"] == nacked
    assert payload["records"]["written"] == {"pg-e2e:db": 300 - nacked}
    assert all("check constraint" in error for error in payload["dlq"]["errors"])


def test_pipeline_end_to_end_first_refused_record_is_fatal_by_default(pg, db, run_yaml, tmp_path, caplog):
    """Conduit's default DLQ window takes no nack: the first record PostgreSQL refuses stops the
    pipeline, and nothing of its batch is written. The destination stops searching there, and the
    record it blames is the one a run that takes every nack sends to the DLQ first."""
    rows(
        pg,
        db,
        "CREATE TABLE orders (id int PRIMARY KEY, name text, amount int CHECK (amount < 900000)); "
        f"ALTER TABLE orders OWNER TO {APP_USER}",
    )
    text = PIPELINE.replace("{url}", db).replace("{key}", "id")
    with caplog.at_level(logging.INFO, logger="airflow_conduit.destination.postgres"):
        payload = run_yaml(text, state_dir=tmp_path / "fatal")
    assert payload["exit_code"] == 1, payload
    assert payload["error"]["code"] == "dlq_threshold_exceeded"
    assert "check constraint" in payload["error"]["message"]
    assert "stopped looking after 1 refused records" in caplog.text
    assert rows(pg, db, "SELECT count(*) FROM orders") == [(0,)]

    taking_all = text + "    dead-letter-queue:\n      plugin: builtin:log\n      window-size: 0\n"
    every_nack = run_yaml(taking_all, state_dir=tmp_path / "all")
    assert every_nack["exit_code"] == 0, every_nack
    assert every_nack["records"]["nacked"] > 1
    first = every_nack["dlq"]["first_position"]
    assert f"at record position {first}," in payload["error"]["message"]
