"""Each record's fate is decided once: every processor runs once per record per attempt at a batch, and
every write, the DLQ, the nack window and the counters read that one decision.

The processors here are what user code looks like: they count their calls in a file (a side effect the
engine cannot see), and the randomized ones draw from an RNG that differs per process and per call, so
evaluating a batch twice gives two different answers.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.config import load_pipeline_text
from airflow_conduit.engine.replay import replay_dlq
from tests.conftest import read_jsonl, text

RECORDS = 200
PER_BATCH = 50

COUNTING = """
import os

from airflow_conduit.errors import FatalError, TransientError

CALLS = {calls!r}
NACK_EVERY = {nack_every}
STOP_AT = {stop_at}
STOP_KIND = {stop_kind!r}


def note(tag, key):
    # One small O_APPEND write per call: lines of concurrent Python workers never interleave.
    fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{{tag}} {{key}}\\n".encode())
    finally:
        os.close(fd)


def count(record):
    key = int(record["key"])
    note("pipeline", key)
    if key == STOP_AT:
        raise (FatalError if STOP_KIND == "fatal" else TransientError)(f"stop at {{key}}")
    if NACK_EVERY and key % NACK_EVERY == 0:
        raise ValueError(f"nack {{key}}")
    return record


def count_at_destination(record):
    note("destination", int(record["key"]))
    return record
"""


def unique_module(tmp_path: Path, stem: str, source: str) -> str:
    """Writes ``source`` as a module of its own name: Spark reuses its Python workers across tests, and a
    worker keeps the first module of a name it imported."""
    udf = tmp_path / "udf"
    udf.mkdir(exist_ok=True)
    name = f"{stem}_{uuid.uuid4().hex[:12]}"
    (udf / f"{name}.py").write_text(source)
    return name


def write_counter(
    tmp_path: Path, *, nack_every: int = 0, stop_at: int = -1, stop_kind: str = ""
) -> tuple[Path, str]:
    """The counting processors' module; returns the calls file and the module's name."""
    calls = tmp_path / "calls.txt"
    source = COUNTING.format(calls=str(calls), nack_every=nack_every, stop_at=stop_at, stop_kind=stop_kind)
    return calls, unique_module(tmp_path, "counting", source)


def calls_of(calls: Path, tag: str = "pipeline") -> Counter[int]:
    if not calls.exists():
        return Counter()
    return Counter(
        int(key) for line in calls.read_text().splitlines() for t, key in [line.split()] if t == tag
    )


def pipeline_yaml(
    module: str,
    *,
    destinations: int = 1,
    destination_processor: bool = False,
    window: tuple[int, int] = (0, 0),
    records: int = RECORDS,
) -> str:
    outs = "".join(
        f'      - {{id: out{i}, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out{i}"}}'
        + (
            ", processors: [{id: dest-count, plugin: custom.python, "
            'settings: {function: "MODULE:count_at_destination", path: "{tmp}/udf"}}]}\n'
            if destination_processor and i == 0
            else "}\n"
        )
        for i in range(destinations)
    )
    return f"""
version: "2.2"
pipelines:
  - id: once
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings: {{recordCount: {records}, maxRecordsPerBatch: {PER_BATCH}, format.type: structured,
                    format.options.name: string}}
{outs}    processors:
      - {{id: count, plugin: custom.python, settings: {{function: "MODULE:count", path: "{{tmp}}/udf"}}}}
    dead-letter-queue:
      plugin: builtin:file
      settings: {{path: "{{tmp}}/dlq"}}
      window-size: {window[0]}
      window-nack-threshold: {window[1]}
""".replace("MODULE", module)


def keys_in(directory: Path) -> list[int]:
    return [int(text(r["key"])) for r in read_jsonl(directory)]


def dlq_keys(directory: Path) -> list[int]:
    return [int(text(r["payload"]["after"]["key"])) for r in read_jsonl(directory)]


@pytest.mark.parametrize(
    ("destinations", "destination_processor"),
    [(1, False), (2, False), (1, True), (2, True)],
    ids=["one-destination", "two-destinations", "destination-processors", "both"],
)
def test_each_record_meets_each_processor_once_with_nacks(
    run_yaml, tmp_path, destinations, destination_processor
):
    calls, module = write_counter(tmp_path, nack_every=10)
    payload = run_yaml(
        pipeline_yaml(module, destinations=destinations, destination_processor=destination_processor)
    )
    assert payload["exit_code"] == 0, payload["error"]
    assert calls_of(calls) == Counter(range(RECORDS))
    nacked = [k for k in range(RECORDS) if k % 10 == 0]
    kept = [k for k in range(RECORDS) if k % 10]
    if destination_processor:
        assert calls_of(calls, "destination") == Counter(kept)
    for i in range(destinations):
        assert keys_in(tmp_path / f"out{i}") == kept
    assert dlq_keys(tmp_path / "dlq") == nacked
    records = payload["records"]
    assert (records["read"], records["nacked"], records["dlq"]) == (RECORDS, len(nacked), len(nacked))
    assert records["written"] == {f"once:out{i}": len(kept) for i in range(destinations)}


@pytest.mark.parametrize("destinations", [1, 2])
@pytest.mark.parametrize("kind", ["transient", "fatal"])
def test_a_stopping_processor_meets_each_record_once(run_yaml, tmp_path, kind, destinations):
    calls, module = write_counter(tmp_path, stop_at=120, stop_kind=kind)
    payload = run_yaml(pipeline_yaml(module, destinations=destinations))
    assert payload["exit_code"] == (75 if kind == "transient" else 1)
    assert payload["error"]["kind"] == kind and payload["error"]["node"] == "once:count"
    # Batches 0-1 committed; batch 2 (100-149) holds the stop: every one of its records was handed to
    # the processor once (it does not stop at the first), none after it.
    assert calls_of(calls) == Counter(range(150))
    for i in range(destinations):
        assert keys_in(tmp_path / f"out{i}") == list(range(100))


def test_the_dlq_threshold_crossed_meets_each_record_once(run_yaml, tmp_path):
    calls, module = write_counter(tmp_path, nack_every=25)
    # Window of 30 records takes one nack: 0 and 25 are in one window, so 25 crosses (batch 0).
    payload = run_yaml(pipeline_yaml(module, window=(30, 1)))
    assert payload["exit_code"] == 1 and payload["error"]["code"] == "dlq_threshold_exceeded"
    assert "position 25" in payload["error"]["message"]
    assert calls_of(calls) == Counter(range(PER_BATCH))
    assert keys_in(tmp_path / "out0") == [] and dlq_keys(tmp_path / "dlq") == []


def test_replay_meets_each_dlq_record_once(spark, run_yaml, tmp_path):
    calls, module = write_counter(tmp_path, nack_every=10)
    assert run_yaml(pipeline_yaml(module))["exit_code"] == 0
    nacked = [k for k in range(RECORDS) if k % 10 == 0]
    calls.unlink()
    _, fixed = write_counter(tmp_path, nack_every=20)  # a partial fix: every 20th still fails
    yaml_text = pipeline_yaml(fixed).replace("{tmp}", str(tmp_path))
    loaded = load_pipeline_text(yaml_text, str(tmp_path / "p.yaml"))
    summary = replay_dlq(spark, loaded.pipelines[0], tmp_path / "state")
    still_failing = [k for k in nacked if k % 20 == 0]
    assert (summary["delivered"], summary["failed_again"]) == (
        len(nacked) - len(still_failing),
        len(still_failing),
    )
    assert calls_of(calls) == Counter(nacked)


RANDOM = """
import os
import random
import time

CALLS = {calls!r}
# Differs per process and per call: a batch evaluated twice decides differently the second time.
RNG = random.Random(f"{seed}-{{os.getpid()}}-{{time.time_ns()}}")


def decide(record):
    key = int(record["key"])
    draw = RNG.random()
    if draw < 0.1:
        fate = "nack"
    elif draw < 0.2:
        fate = "filter"
    else:
        fate = "open"
    collection = RNG.choice(["a", "b"])
    score = RNG.random()
    fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{{key}} {{fate}} {{collection}} {{score!r}}\\n".encode())
    finally:
        os.close(fd)
    if fate == "nack":
        raise ValueError(f"flaky service for {{key}}")
    if fate == "filter":
        return None
    record["metadata"]["opencdc.collection"] = collection
    record["payload"]["after"]["score"] = score
    return record
"""

MARK_HIGH = """
        processors:
          - id: high
            plugin: field.set
            condition: "CAST(.Payload.After.score AS DOUBLE) > 0.5"
            settings: {field: .Payload.After.high, value: "yes"}
"""
ROUTED = (
    """
      - {id: to-a, type: destination, plugin: builtin:file, settings: {path: "{tmp}/a", namespace: "^a$"}}
      - id: to-b
        type: destination
        plugin: builtin:file
        settings: {path: "{tmp}/b", namespace: "^b$"}"""
    + MARK_HIGH
)
SINGLE = """
      - {id: to-all, type: destination, plugin: builtin:file, settings: {path: "{tmp}/all"}}"""
RANDOM_PIPELINE = """
version: "2.2"
pipelines:
  - id: random
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings: {recordCount: 600, maxRecordsPerBatch: 200, format.type: structured, format.options.name: string}
DESTINATIONS
    processors:
      - {id: decide, plugin: custom.python, settings: {function: "MODULE:decide", path: "{tmp}/udf"}}
    dead-letter-queue:
      plugin: builtin:file
      settings: {path: "{tmp}/dlq"}
      window-size: 0
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("routed", [True, False], ids=["two-destinations-by-namespace", "one-destination"])
def test_random_nacks_filters_and_routing_lose_and_double_nothing(run_yaml, tmp_path, seed, routed):
    calls = tmp_path / "decisions.txt"
    module = unique_module(tmp_path, "randomly", RANDOM.format(calls=str(calls), seed=seed))
    yaml_text = RANDOM_PIPELINE.replace("DESTINATIONS", (ROUTED if routed else SINGLE).strip("\n"))
    payload = run_yaml(yaml_text.replace("MODULE", module))
    assert payload["exit_code"] == 0, payload["error"]

    decisions: dict[int, tuple[str, str, float]] = {}
    for line in calls.read_text().splitlines():
        key, fate, collection, score = line.split()
        assert int(key) not in decisions, f"record {key} was decided twice"
        decisions[int(key)] = (fate, collection, float(score))
    assert sorted(decisions) == list(range(600))

    def expected(fate: str, collection: str | None = None) -> list[int]:
        return [k for k, d in sorted(decisions.items()) if d[0] == fate and collection in (None, d[1])]

    outputs = {"a": "a", "b": "b"} if routed else {"all": None}
    written = {name: read_jsonl(tmp_path / name) for name in outputs}
    for name, collection in outputs.items():
        assert [int(text(r["key"])) for r in written[name]] == expected("open", collection)
    assert dlq_keys(tmp_path / "dlq") == expected("nack")
    # The values written are the ones decided, and the destination processor's condition saw them too.
    for name, records in written.items():
        for record in records:
            after: dict[str, Any] = record["payload"]["after"]
            decided = decisions[int(text(record["key"]))]
            assert record["metadata"]["opencdc.collection"] == decided[1]
            assert after["score"] == decided[2]
            if name == "b":
                assert ("high" in after) == (after["score"] > 0.5)
    for record in read_jsonl(tmp_path / "dlq"):
        assert record["metadata"]["conduit.dlq.nack.node.id"] == "random:decide"
        assert "flaky service" in record["metadata"]["conduit.dlq.nack.error"]

    counted = payload["records"]
    held = {f"random:to-{name}": len(records) for name, records in written.items()}
    assert counted["read"] == 600
    assert counted["filtered"] == len(expected("filter"))
    assert counted["nacked"] == counted["dlq"] == len(expected("nack"))
    assert counted["written"] == held
    assert counted["read"] == counted["filtered"] + counted["dlq"] + sum(held.values())
    exit_payload = json.loads((tmp_path / "state" / "random" / "exit.json").read_text())
    assert exit_payload["records"] == counted


CRASH_PIPELINE = (
    RANDOM_PIPELINE.replace("DESTINATIONS", SINGLE.strip("\n"))
    .replace("recordCount: 600", "recordCount: 300")
    .replace("maxRecordsPerBatch: 200", "maxRecordsPerBatch: 100")
)


def test_a_crash_between_publishes_replays_the_same_decision(run_yaml, tmp_path, monkeypatch):
    """The destination published batch 0, then the run died before the DLQ did. The replay must not
    decide batch 0 again: the DLQ gets the nacks of the decision the destination already holds."""
    from airflow_conduit.engine.connectors import jsonl_files

    calls = tmp_path / "decisions.txt"
    module = unique_module(tmp_path, "randomly", RANDOM.format(calls=str(calls), seed=7))
    yaml_text = CRASH_PIPELINE.replace("MODULE", module)
    publish = jsonl_files.StagedFiles.publish

    def crash_before_the_dlq(self):
        if "dlq" in self.staging.parts:
            raise RuntimeError("injected crash between publishes")
        return publish(self)

    monkeypatch.setattr(jsonl_files.StagedFiles, "publish", crash_before_the_dlq)
    first = run_yaml(yaml_text)
    assert first["exit_code"] == 75  # an unexpected error in the batch: transient
    assert read_jsonl(tmp_path / "all") and not read_jsonl(tmp_path / "dlq")  # the crash's window
    monkeypatch.setattr(jsonl_files.StagedFiles, "publish", publish)
    second = run_yaml(yaml_text)
    assert second["exit_code"] == 0, second["error"]

    written, dead = keys_in(tmp_path / "all"), dlq_keys(tmp_path / "dlq")
    assert not set(written) & set(dead), "records both written and in the DLQ"
    fates: dict[int, str] = {}
    for line in calls.read_text().splitlines():
        key, fate, *_ = line.split()
        assert int(key) not in fates, f"record {key} was decided twice"
        fates[int(key)] = fate
    assert sorted(fates) == list(range(300))
    assert written == [k for k, f in sorted(fates.items()) if f == "open"]
    assert dead == [k for k, f in sorted(fates.items()) if f == "nack"]
    assert not (tmp_path / "state" / "random" / "decisions").exists() or not any(
        (tmp_path / "state" / "random" / "decisions").iterdir()
    )


def test_a_batch_computed_once_is_never_computed_again(spark, tmp_path):
    """The engine's materialization (engine/once.py) against Spark's cache: once the stored rows are gone
    (as when an executor is lost), ``persist`` recomputes them, calling the function again; a batch
    computed once refuses instead, and the attempt fails."""
    import os

    from pyspark.storagelevel import StorageLevel

    from airflow_conduit.engine.once import computed_once, release

    calls = tmp_path / "calls.txt"

    def counting(batches):
        for batch in batches:
            fd = os.open(str(calls), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, f"{batch.num_rows}\n".encode())
            os.close(fd)
            yield batch

    def called() -> int:
        count = sum(int(n) for n in calls.read_text().split()) if calls.exists() else 0
        calls.unlink(missing_ok=True)
        return count

    numbers = spark.range(0, 1000, numPartitions=4)
    once = computed_once(numbers.mapInArrow(counting, numbers.schema))
    assert called() == 0  # lazy: the first action computes it
    assert once.count() == 1000 and called() == 1000
    assert once.filter("id % 2 = 0").count() == 500 and called() == 0
    release(once)  # the stored rows are gone
    with pytest.raises(Exception, match="(?i)checkpoint|block|rdd"):
        once.count()
    assert called() == 0

    cached = numbers.mapInArrow(counting, numbers.schema).persist(StorageLevel.MEMORY_AND_DISK)
    assert cached.count() == 1000 and called() == 1000
    spark.sparkContext._jsc.sc().env().blockManager().master().removeRdd(
        spark._jsparkSession.sharedState()
        .cacheManager()
        .lookupCachedData(cached._jdf)
        .get()
        .cachedRepresentation()
        .cacheBuilder()
        .cachedColumnBuffers()
        .id(),
        True,
    )
    assert cached.count() == 1000 and called() == 1000  # persist: every row through the function again
    cached.unpersist()


@pytest.mark.parametrize("outcome", ["nack", "stop"])
def test_a_second_pass_over_several_file_partitions_meets_the_function_once(run_yaml, tmp_path, outcome):
    """A file source read in several partitions, one destination, Conduit's default DLQ (the first nack
    stops): the batch stores nothing, and finding the nacked or stopping record is a second pass,
    which reads each partition's kept output back rather than call the function again."""
    if outcome == "nack":
        calls, module = write_counter(tmp_path, nack_every=700)
    else:
        calls, module = write_counter(tmp_path, stop_at=2500, stop_kind="fatal")
    source = tmp_path / "in"
    source.mkdir()
    for part in range(3):
        lines = (json.dumps({"n": key}) for key in range(part * 1000, (part + 1) * 1000))
        (source / f"part-{part}.jsonl").write_text("\n".join(lines) + "\n")
    udf = tmp_path / "udf" / f"{module}.py"
    udf.write_text(
        udf.read_text()
        .replace('int(record["key"])', 'json.loads(record["payload"]["after"])["n"]')
        .replace("import os", "import json\nimport os")
    )
    payload = run_yaml(f"""
version: "2.2"
pipelines:
  - id: files
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{{tmp}}/in"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{{tmp}}/out"}}}}
    processors:
      - {{id: count, plugin: custom.python, settings: {{function: "{module}:count", path: "{{tmp}}/udf"}}}}
""")
    assert payload["exit_code"] == 1
    expected = "dlq_threshold_exceeded" if outcome == "nack" else "processor_fatal"
    assert payload["error"]["code"] == expected, payload["error"]
    assert calls_of(calls) == Counter(range(3000))  # one batch: every record once, none twice
    assert read_jsonl(tmp_path / "out") == []
    assert not list((tmp_path / "state" / "files" / "memo").glob("*"))  # removed with the batch


def test_a_mapper_keeps_its_output_for_the_batch_attempt(spark, tmp_path):
    """In local mode an unstored batch's Python mappers keep what they yielded (engine/processors/
    _memo.py): a second action reads it back and never calls the function again; once the batch is
    sealed, a partition whose output is gone fails the action rather than call it again; and output
    kept for other rows is refused."""
    import os

    import numpy as np
    import pyarrow as pa

    from airflow_conduit.engine.processors import _memo

    calls = tmp_path / "calls.txt"

    def drawing(batches):  # a random number per row: two evaluations would disagree
        for batch in batches:
            fd = os.open(str(calls), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, f"{batch.num_rows}\n".encode())
            os.close(fd)
            draws = pa.Array.from_buffers(
                pa.float64(), batch.num_rows, [None, pa.py_buffer(np.random.random(batch.num_rows))]
            )
            yield pa.RecordBatch.from_arrays([batch.column("_seq"), draws], names=["_seq", "draw"])

    def called() -> int:
        count = sum(int(n) for n in calls.read_text().split()) if calls.exists() else 0
        calls.unlink(missing_ok=True)
        return count

    def numbers(count: int, partitions: int = 4):
        return spark.range(0, count, numPartitions=partitions).selectExpr("id AS _seq")

    kept = tmp_path / "kept"
    kept.mkdir()
    with _memo.keeping_output(kept):
        drawn = numbers(1000).mapInArrow(_memo.memoized(drawing, "p:draw"), "_seq long, draw double")
    with _memo.keeping_output(kept):  # the same mapper planned again, over other rows from _seq 0
        other_rows = numbers(900, partitions=1).mapInArrow(
            _memo.memoized(drawing, "p:draw"), "_seq long, draw double"
        )
    plain = numbers(1000).mapInArrow(_memo.memoized(drawing, "p:draw"), "_seq long, draw double")

    first = sorted(drawn.collect())
    assert called() == 1000 and len({row.draw for row in first}) == 1000
    assert sorted(drawn.collect()) == first and called() == 0
    assert drawn.filter("_seq % 2 = 0").count() == 500 and called() == 0
    with pytest.raises(Exception, match="kept for"):
        other_rows.count()
    assert called() == 0
    assert plain.count() == 1000 and called() == 1000  # planned outside keeping_output: no memo
    # One task evaluates every partition after a coalesce: each still reads its own output.
    assert sorted(drawn.coalesce(1).collect()) == first and called() == 0

    (kept / _memo.SEALED).touch()
    assert sorted(drawn.collect()) == first and called() == 0
    (kept / "p_draw-0-0.arrow").unlink()  # the partition whose first _seq is 0
    with pytest.raises(Exception, match="gone"):
        drawn.count()
    assert called() == 0


RANDOM_CONDITION = """
version: "2.2"
pipelines:
  - id: coin
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 400, maxRecordsPerBatch: 200}}
      - {id: out0, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out0"}}
      - {id: out1, type: destination, plugin: builtin:file, settings: {path: "{tmp}/out1"}}
    processors:
      - {id: coin, plugin: filter, condition: "rand() < 0.5"}
"""


def test_a_builtin_processor_with_a_random_condition_is_decided_once(run_yaml, tmp_path):
    """Built-in processors are Spark expressions; one that Spark deems non-deterministic is stored after
    it runs, like custom.python, so both destinations get the same coin flips."""
    payload = run_yaml(RANDOM_CONDITION)
    assert payload["exit_code"] == 0, payload["error"]
    kept = keys_in(tmp_path / "out0")
    assert keys_in(tmp_path / "out1") == kept
    assert 100 < len(kept) < 300  # the coin was flipped
    assert payload["records"]["filtered"] == 400 - len(kept)
    assert payload["records"]["written"] == {"coin:out0": len(kept), "coin:out1": len(kept)}


@pytest.mark.parametrize(
    ("processor", "pure", "unstored"),
    [
        ("{id: p, plugin: field.set, settings: {field: .Payload.After.x, value: '1'}}", True, True),
        ("{id: p, plugin: filter, condition: \".Operation = 'create'\"}", True, True),
        ("{id: p, plugin: filter, condition: 'rand() < 0.5'}", False, False),
        ("{id: p, plugin: filter, condition: 'uuid() IS NOT NULL'}", False, False),
        (
            "{id: p, plugin: filter, condition: \"current_timestamp() > TIMESTAMP '2020-01-01'\"}",
            False,
            False,
        ),
        # Not pure, but in local mode its Python mapper keeps what it yielded for the batch attempt.
        ("{id: p, plugin: custom.python, settings: {function: 'json:dumps'}}", False, True),
        (
            "{id: p, plugin: custom.python, condition: 'rand() < 0.5', settings: {function: 'json:dumps'}}",
            False,
            False,
        ),
    ],
    ids=["field.set", "filter", "rand", "uuid", "clock", "custom.python", "custom.python-rand"],
)
def test_which_processors_may_be_evaluated_again(spark, tmp_path, processor, pure, unstored):
    """And so whether a batch's rows are stored, which sets the default records per batch."""
    from airflow_conduit.config.settings import DEFAULT_MAX_RECORDS_PER_BATCH, UNSTORED_MAX_RECORDS_PER_BATCH
    from airflow_conduit.engine.batch import BatchProcessor
    from airflow_conduit.engine.intake import admitted_sources
    from airflow_conduit.engine.processors import is_pure
    from airflow_conduit.record import RECORD_SCHEMA
    from airflow_conduit.state import PipelineState

    text = f"""
version: "2.2"
pipelines:
  - id: purity
    connectors:
      - {{id: gen, type: source, plugin: builtin:generator}}
      - {{id: out, type: destination, plugin: builtin:log}}
    processors:
      - {processor}
"""
    proc = load_pipeline_text(text, "<purity>").pipelines[0].processors[0]
    assert is_pure(proc, spark.createDataFrame([], RECORD_SCHEMA)) is pure
    bulk = text.replace(
        "plugin: builtin:log}", f"plugin: builtin:file, settings: {{path: '{tmp_path}/out'}}}}"
    )
    pipeline = load_pipeline_text(bulk, "<purity>").pipelines[0]
    batches = BatchProcessor(pipeline, PipelineState(tmp_path, pipeline.id), "g")
    assert batches.analyse(spark).unstored is unstored
    [source] = admitted_sources(pipeline, nothing_stored=batches.nothing_stored)
    default = UNSTORED_MAX_RECORDS_PER_BATCH if unstored else DEFAULT_MAX_RECORDS_PER_BATCH
    assert source.settings.max_records_per_batch == default
