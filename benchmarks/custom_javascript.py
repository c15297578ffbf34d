"""A trivial ``custom.javascript`` processor against the same in ``custom.python``, in one process.

Both run the executors' side of the engine (the function Spark's Arrow UDF calls) on the same Arrow
batches of generated records: JSON text in ``after_json``, as Spark hands them over. Spark's share (the
``VARIANT`` to JSON text and back, the Arrow transfer) is the same for both and is left out, so the
ratio is that of the processors themselves. Rounds alternate; medians are printed.

    .venv/bin/python benchmarks/custom_javascript.py [--records N] [--batch N] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_conduit.engine.processors.custom_python import arrow_schema, make_mapper

SCRIPT = 'function process(record) { record.Payload.After.env = "prod"; return record; }'


def tag(record: dict[str, Any]) -> dict[str, Any]:
    """The Python twin of SCRIPT."""
    record["payload"]["after"]["env"] = "prod"
    return record


SCHEMA = arrow_schema()


def batches(records: int, size: int) -> list[pa.RecordBatch]:
    rng = random.Random(7)
    rows = [
        {
            "position": str(i).encode(),
            "operation": "create",
            "metadata": json.dumps({"opencdc.collection": "orders"}),  # as conduit_map_json writes it
            "key_raw": str(i).encode(),
            "after_json": json.dumps(
                {
                    "id": i,
                    "kind": rng.choice(["sale", "refund"]),
                    "amount": rng.random() * 100,
                    "sku": f"sku-{i % 97}",
                }
            ),
            "_active": True,
        }
        for i in range(records)
    ]
    full = [{name: None for name in SCHEMA.names} | row for row in rows]
    return [pa.RecordBatch.from_pylist(full[i : i + size], schema=SCHEMA) for i in range(0, records, size)]


def timed(mapper: Any, data: list[pa.RecordBatch]) -> float:
    start = time.perf_counter()
    out = list(mapper(iter(data)))
    elapsed = time.perf_counter() - start
    assert sum(b.num_rows for b in out) == sum(b.num_rows for b in data)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000, help="records per Arrow batch (Spark's default)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    here = str(Path(__file__).resolve().parent)
    sys.path.insert(0, here)
    data = batches(args.records, args.batch)
    settings = json.dumps({"script": SCRIPT, "script.path": "", "source": SCRIPT})
    mappers = {
        "custom.python": make_mapper("custom_javascript:tag", here, "bench:py"),
        "custom.javascript": make_mapper(
            "airflow_conduit.engine.processors.custom_javascript:make", None, "bench:js", settings=settings
        ),
    }
    # Same output, checked once: both add the field to every record.
    for mapper in mappers.values():
        [first] = list(mapper(iter(data[:1])))
        assert all('"env":"prod"' in text.replace(" ", "") for text in first.column("after_json").to_pylist())
    times: dict[str, list[float]] = {name: [] for name in mappers}
    for _ in range(args.repeat):
        for name, mapper in mappers.items():
            times[name].append(timed(mapper, data))
    rates = {name: args.records / statistics.median(t) for name, t in times.items()}
    print(f"{args.records:,} records, Arrow batches of {args.batch:,}, median of {args.repeat} rounds")
    for name, rate in rates.items():
        print(f"  {name:18} {rate:12,.0f} records/s")
    print(f"custom.javascript / custom.python = {rates['custom.javascript'] / rates['custom.python']:.2f}x")


if __name__ == "__main__":
    main()
