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
