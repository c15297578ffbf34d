"""``GeneratorSpec``, the generator's pure record function, and its stream reader's offsets (no Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest

from airflow_conduit.config.settings import GeneratorSettings
from airflow_conduit.engine.connectors._stream import SourceContext, source_options
from airflow_conduit.engine.connectors.generator import GeneratorSpec, GeneratorStreamReader

# Columns of a generated row (the source schema of record.py).
POSITION, OPERATION, METADATA, KEY_JSON, KEY_RAW, BEFORE_JSON, BEFORE_RAW, AFTER_JSON, AFTER_RAW = range(9)


def settings_of(**given: Any) -> GeneratorSettings:
    """Settings as the engine gets them: validated, defaults filled."""
    return GeneratorSettings.model_validate(given)


def spec_of(**given: Any) -> GeneratorSpec:
    return GeneratorSpec.from_settings(settings_of(**given))


def rows(spec: GeneratorSpec, count: int = 200) -> list[tuple]:
    return [spec.row(i) for i in range(count)]


def test_same_seed_same_records():
    given = {"seed": 42, "operations": "create,update,delete", "collections": "a,b"}
    assert rows(spec_of(**given)) == rows(spec_of(**given))
    # Record i does not depend on what was generated before it (a replayed micro-batch starts anywhere).
    spec = spec_of(**given)
    assert [spec.row(i) for i in range(150, 200)] == rows(spec)[150:]


def test_same_seed_same_records_in_another_process():
    """Nothing process-specific (such as Python's salted ``hash``) goes into a record: a replay on
    another executor yields the same bytes."""
    code = (
        "import json, sys\n"
        "from airflow_conduit.config.settings import GeneratorSettings\n"
        "from airflow_conduit.engine.connectors.generator import GeneratorSpec\n"
        "s = GeneratorSettings.model_validate({'seed': 7, 'operations': 'create,update'})\n"
        "spec = GeneratorSpec.from_settings(s)\n"
        "print(json.dumps([[v.decode() if isinstance(v, bytes) else v for v in spec.row(i)] for i in range(20)]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    here = spec_of(seed=7, operations="create,update")
    expected = [[v.decode() if isinstance(v, bytes) else v for v in here.row(i)] for i in range(20)]
    assert json.loads(result.stdout) == expected


def test_different_seeds_differ():
    one, other = rows(spec_of(seed=1)), rows(spec_of(seed=2))
    differing = sum(a[AFTER_JSON] != b[AFTER_JSON] for a, b in zip(one, other, strict=True))
    assert differing >= 190  # essentially every record
    # Keys and positions are the record number whatever the seed.
    assert [r[KEY_RAW] for r in one] == [r[KEY_RAW] for r in other] == [str(i).encode() for i in range(200)]


@pytest.mark.parametrize("operations", ["update,delete", "snapshot", "create,delete,update,snapshot"])
def test_operations_only_the_configured_ones(operations):
    configured = operations.split(",")
    generated = Counter(r[OPERATION] for r in rows(spec_of(operations=operations, seed=3)))
    assert set(generated) == set(configured)  # each configured one occurs, no other does
    if len(configured) > 1:
        # Spread over them, not stuck on one: each gets a fair share of 200 records.
        assert min(generated.values()) >= 200 / len(configured) / 2


def test_payload_parts_follow_the_operation():
    for row in rows(spec_of(operations="create,update,delete,snapshot", seed=5)):
        has_before, has_after = row[BEFORE_JSON] is not None, row[AFTER_JSON] is not None
        assert has_before == (row[OPERATION] in ("update", "delete"))
        assert has_after == (row[OPERATION] != "delete")
        if has_before and has_after:
            assert row[BEFORE_JSON] != row[AFTER_JSON]  # an update changes something


def test_collections_round_robin_and_none():
    spec = spec_of(collections="orders, refunds,users")
    assert [spec.row(i)[METADATA]["opencdc.collection"] for i in range(7)] == [
        "orders",
        "refunds",
        "users",
        "orders",
        "refunds",
        "users",
        "orders",
    ]
    assert spec_of().row(0)[METADATA] == {}


def test_structured_and_raw_carry_the_same_data():
    given = {"seed": 9, "format.options.id": "int", "format.options.flag": "bool"}
    structured = spec_of(**given)
    raw = spec_of(**given, **{"format.type": "raw"})
    for i in range(20):
        s, r = structured.row(i), raw.row(i)
        assert s[AFTER_RAW] is None and r[AFTER_JSON] is None
        assert json.loads(r[AFTER_RAW]) == json.loads(s[AFTER_JSON])


def test_field_kinds():
    spec = spec_of(
        **{
            "format.options.n": "int",
            "format.options.s": "string",
            "format.options.b": "bool",
            "format.options.t": "time",
            "format.options.d": "duration",
        }
    )
    values = [json.loads(spec.row(i)[AFTER_JSON]) for i in range(100)]
    assert all(set(v) == {"n", "s", "b", "t", "d"} for v in values)
    assert all(type(v["n"]) is int for v in values)
    assert all(type(v["s"]) is str for v in values)
    assert {v["b"] for v in values} == {True, False}
    assert len({v["t"] for v in values}) > 90 and len({v["n"] for v in values}) > 90  # values vary


def reader(**given: Any) -> GeneratorStreamReader:
    ctx = SourceContext("gen", "p:gen", "/nonexistent/stop-file")
    return GeneratorStreamReader(source_options(spec_of(**given), ctx))


def test_reader_offsets_stop_at_record_count_in_batches_of_the_limit():
    gen = reader(recordCount=10, maxRecordsPerBatch=4)
    gen.prepareForTriggerAvailableNow()
    ends, start = [], gen.initialOffset()
    for _ in range(5):
        end = gen.latestOffset(start, gen.getDefaultReadLimit())
        ends.append(end["records"])
        if end == start:
            break
        # The partitions of a micro-batch cover exactly its records, in order.
        covered = [i for p in gen.partitions(start, end) for i in range(p.start, p.end)]
        assert covered == list(range(start["records"], end["records"]))
        start = end
    assert ends == [4, 8, 10, 10]


def test_reader_until_idle_with_a_rate_generates_every_record_at_that_pace():
    """An until-idle run ends when the offset stops moving: a rate must pace the records, not end the
    run before the first one is due (it used to generate nothing)."""
    rate = 100
    gen = reader(recordCount=20, rate=rate, maxRecordsPerBatch=1000)
    gen.prepareForTriggerAvailableNow()
    start, ends = gen.initialOffset(), []
    began = time.monotonic()
    while len(ends) < 50:
        end = gen.latestOffset(start, gen.getDefaultReadLimit())
        elapsed = time.monotonic() - began
        if end == start:
            break
        assert end["records"] <= elapsed * rate  # never ahead of the rate
        ends.append(end["records"])
        start = end
    assert ends[-1:] == [20]
    assert ends == sorted(set(ends))
    assert time.monotonic() - began >= 20 / rate


# --- Conduit's collections.<name>.* map, format.type file, burst.* ---------------------------------------

USERS_AND_ORDERS = {
    # Conduit's README example "Collections": users (structured, create), orders (raw, create/update/delete).
    "collections.users.format.type": "structured",
    "collections.users.format.options.id": "int",
    "collections.users.format.options.name": "string",
    "collections.users.operations": "create",
    "collections.orders.format.type": "raw",
    "collections.orders.format.options.id": "int",
    "collections.orders.format.options.product": "string",
    "collections.orders.operations": "create,update,delete",
}


def test_collections_map_each_collection_its_operations_and_format():
    by_collection: dict[str, list[tuple]] = {}
    for row in rows(spec_of(**USERS_AND_ORDERS, seed=4), 3000):
        by_collection.setdefault(row[METADATA].get("opencdc.collection", ""), []).append(row)
    # Without a top-level format.type there is no default collection (Conduit's GetCollectionConfigs).
    assert set(by_collection) == {"users", "orders"}
    # Conduit picks a collection at random per record, each as likely: 3000 records, about half each.
    assert all(1300 <= len(found) <= 1700 for found in by_collection.values()), {
        name: len(found) for name, found in by_collection.items()
    }
    # The records of a collection are not taken in turn (random, not round-robin).
    names = [r[METADATA]["opencdc.collection"] for r in rows(spec_of(**USERS_AND_ORDERS, seed=4), 40)]
    assert names != ["users", "orders"] * 20 and names != ["orders", "users"] * 20
    users, orders = by_collection["users"], by_collection["orders"]
    assert {r[OPERATION] for r in users} == {"create"}
    assert {r[OPERATION] for r in orders} == {"create", "update", "delete"}
    # users: structured {id, name}; orders: raw JSON {id, product}.
    for row in users:
        assert row[AFTER_RAW] is None and set(json.loads(row[AFTER_JSON])) == {"id", "name"}
    for row in orders:
        assert row[AFTER_JSON] is None and row[BEFORE_JSON] is None
        for data in (row[BEFORE_RAW], row[AFTER_RAW]):
            if data is not None:
                assert set(json.loads(data)) == {"id", "product"}


def test_collections_map_with_a_top_level_format_adds_the_default_collection():
    given = {**USERS_AND_ORDERS, "format.type": "structured", "format.options.x": "bool"}
    found = Counter(r[METADATA].get("opencdc.collection") for r in rows(spec_of(**given, seed=2), 3000))
    assert set(found) == {None, "users", "orders"}  # the default collection's records carry none
    assert all(800 <= n <= 1200 for n in found.values()), found


def test_collections_list_and_map_together_is_ambiguous():
    with pytest.raises(ValueError, match="either a comma-separated list of names or collections"):
        settings_of(collections="a,b", **USERS_AND_ORDERS)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"collections.users.operations": "create"}, "format.type"),  # Conduit requires it per collection
        ({"collections.users.format.type": "avro"}, "structured"),
        ({"collections.users.format.type": "raw", "collections.users.format.options.id": "float"}, "float"),
        ({"collections.users.format.type": "raw", "collections.users.operations": "upsert"}, "operations"),
        ({"collections.users.format.type": "raw", "collections.users.colour": "red"}, "colour"),
        ({"format.type": "file"}, "format.options.path not specified"),
        ({"format.type": "file", "format.options.path": "/nonexistent/x.json"}, "cannot read"),
        ({"burst.sleepTime": "1s", "burst.generateTime": "0s"}, "burst.generateTime"),
        ({"burst.sleepTime": "1 second"}, "not a Go duration"),
    ],
)
def test_collection_file_and_burst_settings_refused_as_conduit_does(given, message):
    with pytest.raises(ValueError, match=message):
        settings_of(**given)


def test_field_type_matched_case_insensitively_as_in_conduit():
    spec = spec_of(**{"format.options.n": "INT"})
    assert isinstance(json.loads(spec.row(0)[AFTER_JSON])["n"], int)


def test_format_file_payload_is_the_files_contents(tmp_path):
    """Conduit's NewFileRecordGenerator: the payload data is the file's bytes, raw."""
    contents = b'{"hello": "world"}\n\x00binary too'
    path = tmp_path / "payload.bin"
    path.write_bytes(contents)
    spec = spec_of(
        **{"format.type": "file", "format.options.path": str(path), "operations": "create,update,delete"},
        seed=6,
    )
    path.write_bytes(b"changed later")  # read once, when the source opens
    seen = set()
    for row in rows(spec, 60):
        seen.add(row[OPERATION])
        assert row[BEFORE_JSON] is None and row[AFTER_JSON] is None
        assert row[BEFORE_RAW] == (contents if row[OPERATION] in ("update", "delete") else None)
        assert row[AFTER_RAW] == (contents if row[OPERATION] != "delete" else None)
    assert seen == {"create", "update", "delete"}


def test_format_file_per_collection(tmp_path):
    (tmp_path / "a.txt").write_text("AAA")
    (tmp_path / "b.txt").write_text("BBB")
    spec = spec_of(
        **{
            "collections.a.format.type": "file",
            "collections.a.format.options.path": str(tmp_path / "a.txt"),
            "collections.b.format.type": "file",
            "collections.b.format.options.path": str(tmp_path / "b.txt"),
        }
    )
    for row in rows(spec, 50):
        assert row[AFTER_RAW] == row[METADATA]["opencdc.collection"].upper().encode() * 3


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def paced_reader(monkeypatch, **given: Any) -> tuple[GeneratorStreamReader, FakeClock]:
    clock = FakeClock()
    monkeypatch.setattr("airflow_conduit.engine.connectors.generator.time.monotonic", clock)
    return reader(**given), clock


def test_burst_with_a_rate_generates_rate_times_generate_time_then_sleeps(monkeypatch):
    """Conduit's README "Bursts": rate 10, generateTime 1s, sleepTime 1s: bursts of 10 records, one per
    two seconds."""
    gen, clock = paced_reader(
        monkeypatch, rate=10, recordCount=100, **{"burst.generateTime": "1s", "burst.sleepTime": "1s"}
    )
    start = gen.initialOffset()
    limit = gen.getDefaultReadLimit()
    seen = []
    # The clock starts when Spark first asks (Conduit's: when the source opens), with a burst.
    for t in (0.0, 0.5, 1.0, 1.5, 1.99, 2.5, 3.0, 3.7, 4.2, 19.0, 25.0):
        clock.now = 1000.0 + t
        seen.append(gen.latestOffset(start, limit)["records"])
    assert seen == [0, 5, 10, 10, 10, 15, 20, 20, 22, 100, 100]


def test_burst_without_a_rate_admits_batches_while_generating_nothing_while_sleeping(monkeypatch):
    gen, clock = paced_reader(
        monkeypatch, maxRecordsPerBatch=7, **{"burst.generateTime": "200ms", "burst.sleepTime": "300ms"}
    )
    limit = gen.getDefaultReadLimit()
    start = {"records": 0}
    assert gen.latestOffset(start, limit) == {"records": 7}  # the clock starts with a burst
    clock.now += 0.3  # 0.3 s in: sleeping
    assert gen.latestOffset({"records": 7}, limit) == {"records": 7}
    clock.now += 0.25  # 0.55 s in: the next burst
    assert gen.latestOffset({"records": 7}, limit) == {"records": 14}


def test_until_idle_burst_waits_out_the_sleep_and_generates_every_record():
    gen = reader(
        recordCount=6, maxRecordsPerBatch=2, **{"burst.generateTime": "50ms", "burst.sleepTime": "150ms"}
    )
    gen.prepareForTriggerAvailableNow()
    start, ends = gen.initialOffset(), []
    while len(ends) < 20:
        end = gen.latestOffset(start, gen.getDefaultReadLimit())
        if end == start:
            break
        ends.append(end["records"])
        start = end
    assert ends[-1] == 6 and ends == sorted(set(ends))
