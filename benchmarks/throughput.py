"""Throughput of file -> json.decode -> field.set -> file against the bare Spark job a user would write.

Both run in the same SparkSession on the same 1M JSON lines, so the ratio holds on a noisy machine even
when absolute times drift. A second bare job writes the pipeline's own output (OpenCDC lines): no engine
that keeps that output format can beat it, so its ratio is the ceiling for the pipeline's. Two more
pipelines add a ``custom.python`` processor: a pass-through, and one that nacks 10% of the records into
a file DLQ that takes every nack. A third bare job does only what the engine's record model does to each
record (parse into ``VARIANT``, set the field, write the OpenCDC line), read by Spark's own text reader
with no guarantees: the most any pipeline over ``VARIANT`` records can reach. For each pipeline the benchmark also reports the most memory and disk
that Spark's block managers held while it ran: the micro-batch's records, stored once so that every
write reads the same rows (engine/once.py).

    .venv/bin/python benchmarks/throughput.py [--records N] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from airflow_conduit.config import load_pipeline_text
from airflow_conduit.engine.job import RunOptions
from airflow_conduit.engine.runner import run_pipeline
from airflow_conduit.engine.session import get_session

PIPELINE = """
version: "2.2"
pipelines:
  - id: {id}
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{source}"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{target}"}}}}
    processors:
      - {{id: decode, plugin: json.decode, settings: {{field: .Payload.After}}}}
      - {{id: tag, plugin: field.set, settings: {{field: .Payload.After.env, value: prod}}}}
{extra}
"""
DATA_SCHEMA = "id long, kind string, amount double, sku string"
"""What the bare jobs are told the lines hold (the pipeline is told nothing)."""
PASS_THROUGH = """      - id: py
        plugin: custom.python
        settings: {function: "passthrough:identity", path: "%s"}
"""
NACK_TENTH = """      - id: py
        plugin: custom.python
        settings: {function: "passthrough:nack_tenth", path: "%s"}
    dead-letter-queue:
      plugin: builtin:file
      settings: {path: "%s"}
      window-size: 0
"""
FUNCTIONS = """import zlib


def identity(record):
    return record


def nack_tenth(record):
    if zlib.crc32(record["position"]) % 10 == 0:
        raise ValueError("refused by the service")
    return record
"""


class StoragePeak:
    """The most bytes Spark's block managers held (memory, disk) while the block ran, sampled every
    50 ms: what materializing the micro-batches cost."""

    def __init__(self, spark) -> None:
        self.context = spark.sparkContext._jsc.sc()
        self.memory = self.disk = 0
        self._done = threading.Event()

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            infos = self.context.getRDDStorageInfo()
            self.memory = max(self.memory, sum(i.memSize() for i in infos))
            self.disk = max(self.disk, sum(i.diskSize() for i in infos))

    def __enter__(self) -> StoragePeak:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def make_data(path: Path, records: int) -> int:
    rng = random.Random(7)
    kinds = ["order", "refund", "exchange"]
    with path.open("w") as fh:
        for i in range(records):
            fh.write(
                json.dumps(
                    {
                        "id": i,
                        "kind": rng.choice(kinds),
                        "amount": round(rng.random() * 500, 2),
                        "sku": f"S{rng.randrange(10**5):05d}",
                    }
                )
                + "\n"
            )
    return path.stat().st_size


def bare_spark(spark, source: Path, target: Path) -> float:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    frame = spark.read.schema(DATA_SCHEMA).json(str(source))
    frame.withColumn("env", F.lit("prod")).write.mode("overwrite").json(str(target))
    return time.perf_counter() - started


def bare_spark_opencdc(spark, source: Path, target: Path) -> float:
    """The bare job writing what the pipeline writes: each record as an OpenCDC line (position,
    operation, metadata, key, payload before/after). It still knows the schema, runs once as a batch
    job, and keeps none of the pipeline's guarantees; its positions are row ids, not byte offsets. So it
    bounds from above what any engine can reach while it writes OpenCDC."""
    started = time.perf_counter()
    frame = spark.read.schema(DATA_SCHEMA).json(str(source))
    envelope = (
        "to_json(named_struct("
        f"'position', base64(cast(concat('{source.name}:', monotonically_increasing_id()) as binary)), "
        "'operation', 'create', "
        "'metadata', map('opencdc.readAt', cast(unix_micros(current_timestamp()) * 1000 as string), "
        "'conduit.source.connector.id', 'bare:in'), "
        "'key', cast(null as string), "
        "'payload', named_struct('before', cast(null as string), 'after', "
        "named_struct('amount', amount, 'env', 'prod', 'id', id, 'kind', kind, 'sku', sku))), "
        "map('ignoreNullFields', 'false'))"
    )
    frame.selectExpr(f"{envelope} AS value").write.mode("overwrite").text(str(target))
    return time.perf_counter() - started


def variant_floor(spark, source: Path, target: Path) -> float:
    """The engine's record model alone, as one batch job with none of the pipeline's guarantees: each
    line read by Spark's own text reader, parsed into ``VARIANT`` (what ``json.decode`` does), the field
    set with the same SQL ``field.set`` builds, and written as OpenCDC lines with the engine's own
    envelope. No pipeline that keeps ``VARIANT`` records can beat it: it bounds what engine work on
    sources, micro-batches and guarantees could ever win back."""
    from pyspark.sql import functions as F

    from airflow_conduit.engine.processors._expr import set_path
    from airflow_conduit.record import opencdc_json_sql

    started = time.perf_counter()
    records = spark.read.text(str(source)).selectExpr(
        f"cast(concat('{source.name}:', monotonically_increasing_id()) as binary) AS position",
        "'create' AS operation",
        f"map('file.path', '{source}', 'opencdc.readAt', "
        "cast(unix_micros(current_timestamp()) * 1000 as string), "
        "'conduit.source.connector.id', 'bare:in') AS metadata",
        "CAST(NULL AS VARIANT) AS key",
        "cast(cast(monotonically_increasing_id() as string) as binary) AS key_raw",
        "CAST(NULL AS VARIANT) AS before",
        "CAST(NULL AS BINARY) AS before_raw",
        "try_parse_json(value) AS after",
        "CAST(NULL AS BINARY) AS after_raw",
    )
    records = records.withColumn("after", F.expr(set_path("after", ("env",), "cast('prod' as variant)")))
    records.selectExpr(f"{opencdc_json_sql()} AS value").write.mode("overwrite").text(str(target))
    return time.perf_counter() - started


def bare_spark_python(spark, source: Path, target: Path, function_dir: Path) -> float:
    """Bare Spark with the same pass-through: each row to the Python function as a dict and back
    (``mapInArrow``), the way a user would add a per-record Python step to the job above."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    def each_row(batches):
        sys.path.insert(0, str(function_dir))
        from passthrough import identity

        for batch in batches:
            yield pa.RecordBatch.from_pylist(
                [identity(row) for row in batch.to_pylist()], schema=batch.schema
            )

    started = time.perf_counter()
    frame = spark.read.schema(DATA_SCHEMA).json(str(source))
    with_env = frame.withColumn("env", F.lit("prod"))
    with_env.mapInArrow(each_row, with_env.schema).write.mode("overwrite").json(str(target))
    return time.perf_counter() - started


PEAKS: dict[str, list[tuple[int, int]]] = {}
"""Per pipeline kind, the (memory, disk) peaks of its measured rounds."""


def conduit(spark, work: Path, source: Path, name: str, extra: str = "", kind: str = "") -> float:
    target = work / f"out-{name}"
    state = work / f"state-{name}"
    dlq = work / f"dlq-{name}"
    for path in (target, state, dlq):
        shutil.rmtree(path, ignore_errors=True)
    text = PIPELINE.format(id=name, source=source, target=target, extra=extra.replace("DLQ", str(dlq)))
    pipeline = load_pipeline_text(text, f"<{name}>").pipelines[0]
    with StoragePeak(spark) as peak:
        started = time.perf_counter()
        payload = run_pipeline(spark, pipeline, state, RunOptions(until_idle=True))
        elapsed = time.perf_counter() - started
    if payload["exit_code"] != 0:
        sys.exit(f"{name} failed: {payload['error']}")
    if kind:
        PEAKS.setdefault(kind, []).append((peak.memory, peak.disk))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="conduit-bench-"))
    source = work / "in"
    source.mkdir()
    size = make_data(source / "data.jsonl", args.records)
    (work / "passthrough.py").write_text(FUNCTIONS)
    spark = get_session(args.master)
    print(f"{args.records:,} JSON lines, {size / 1e6:.0f} MB, master {args.master}, {args.repeat} rounds")

    extra = PASS_THROUGH % work
    nacking = NACK_TENTH % (work, "DLQ")
    results: dict[str, list[float]] = {
        "bare": [],
        "bare_opencdc": [],
        "variant_floor": [],
        "pipeline": [],
        "python": [],
        "python_nacks": [],
        "bare_python": [],
    }
    # One unmeasured run of each job first: JIT, Python workers and file cache (the pipeline's first run
    # in a session is about twice as slow as the next ones).
    bare_spark(spark, source, work / "warmup")
    bare_spark_opencdc(spark, source, work / "warmup-opencdc")
    variant_floor(spark, source, work / "warmup-floor")
    conduit(spark, work, source, "warm")
    conduit(spark, work, source, "warm-py", extra)
    conduit(spark, work, source, "warm-nack", nacking)
    bare_spark_python(spark, source, work / "warmup-py", work)
    for round_ in range(args.repeat):
        results["bare"].append(bare_spark(spark, source, work / "out-bare"))
        results["bare_opencdc"].append(bare_spark_opencdc(spark, source, work / "out-bare-opencdc"))
        results["variant_floor"].append(variant_floor(spark, source, work / "out-floor"))
        results["pipeline"].append(conduit(spark, work, source, f"p{round_}", kind="pipeline"))
        results["python"].append(conduit(spark, work, source, f"py{round_}", extra, kind="python"))
        results["python_nacks"].append(
            conduit(spark, work, source, f"nack{round_}", nacking, kind="python_nacks")
        )
        results["bare_python"].append(bare_spark_python(spark, source, work / "out-bare-py", work))
    rate = {k: args.records / statistics.median(v) for k, v in results.items()}
    print(f"bare Spark (read JSON, add column, write JSON): {rate['bare']:>10,.0f} records/s")
    print(
        f"bare Spark writing the same OpenCDC lines:      {rate['bare_opencdc']:>10,.0f} records/s  "
        f"ratio {rate['bare_opencdc'] / rate['bare']:.2f}x (the ceiling for OpenCDC output)"
    )
    print(
        f"the record model alone (VARIANT, no engine):    {rate['variant_floor']:>10,.0f} records/s  "
        f"{rate['variant_floor'] / rate['bare_opencdc']:.2f}x of the ceiling (the most a VARIANT pipeline can reach)"
    )
    print(
        f"pipeline file->json.decode->field.set->file:    {rate['pipeline']:>10,.0f} records/s  "
        f"{rate['pipeline'] / rate['bare_opencdc']:.2f}x of the ceiling (goal >= 0.5x), "
        f"{rate['pipeline'] / rate['variant_floor']:.2f}x of the record model alone"
    )
    print(
        f"  + custom.python pass-through:                 {rate['python']:>10,.0f} records/s  "
        f"{rate['python'] / rate['bare_opencdc']:.2f}x of the ceiling (goal >= 0.3x)"
    )
    print(
        f"  + custom.python nacking 10% into a file DLQ:  {rate['python_nacks']:>10,.0f} records/s  "
        f"{rate['python_nacks'] / rate['bare_opencdc']:.2f}x of the ceiling"
    )
    print(
        f"bare Spark + the same Python pass-through:       {rate['bare_python']:>10,.0f} records/s  "
        f"(custom.python pipeline at {rate['python'] / rate['bare_python']:.2f}x of it)"
    )
    print("ratios to the ceiling (bare Spark writing OpenCDC lines):")
    for kind in ("pipeline", "python", "python_nacks"):
        memory = max(m for m, _ in PEAKS[kind]) / 1e6
        disk = max(d for _, d in PEAKS[kind]) / 1e6
        print(
            f"  {kind:<13} {rate[kind] / rate['bare_opencdc']:.3f}x   "
            f"peak stored by Spark: {memory:,.0f} MB memory, {disk:,.0f} MB disk"
        )
    print("medians of", {k: [round(x, 2) for x in v] for k, v in results.items()})
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
