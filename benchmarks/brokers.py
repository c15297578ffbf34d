"""Throughput of the broker and object-store connectors, each beside its own client (the ceiling).

For each of S3 (moto's server), NATS JetStream, Redis Streams and RabbitMQ, on a throwaway server on
127.0.0.1 started by the benchmark, in one process and one SparkSession:

(a) the connector's source -> the file destination, one ``--until-idle`` run;
(b) the file source -> the connector's destination, one ``--until-idle`` run;
(c) the broker's own Python client doing the same bulk read and the same bulk write (the ceiling).

Printed as messages/s and the ratios (a)/(c read) and (b)/(c write), measured in the same run: the
machine is shared and noisy, so absolute rates drift and the ratios are what to compare. Each
connector's script (``broker_<name>.py``) runs alone too and says exactly what it times.

    .venv/bin/python benchmarks/brokers.py [--records N] [--only s3,nats,redis,rabbitmq]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

CONNECTORS = {
    "s3": "broker_s3",
    "nats": "broker_nats",
    "redis": "broker_redis",
    "rabbitmq": "broker_rabbitmq",
}
# S3 holds one record per object: a GET per record, so it gets fewer records in the same time.
DEFAULT_RECORDS = {"s3": 2_000, "nats": 100_000, "redis": 100_000, "rabbitmq": 50_000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="messages per connector (default: per connector)")
    parser.add_argument("--only", default=",".join(CONNECTORS), help="comma-separated connectors")
    args = parser.parse_args()
    rows = []
    for name in args.only.split(","):
        module = importlib.import_module(CONNECTORS[name])
        n = args.records or DEFAULT_RECORDS[name]
        print(f"{name}: {n:,} messages ...", file=sys.stderr, flush=True)
        rows.append((name, module.bench(n)))
    print()
    print(
        "| connector | messages | source → file msg/s | client read msg/s | ratio | file → destination msg/s | client write msg/s | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, f in rows:
        print(
            f"| {name} | {int(f.get('records', f.get('n', 0))):,} | {f['source_to_file_msgs_per_s']:,.0f} "
            f"| {f['client_read_msgs_per_s']:,.0f} | {f['source_ratio']:.2f} "
            f"| {f['file_to_destination_msgs_per_s']:,.0f} | {f['client_write_msgs_per_s']:,.0f} "
            f"| {f['destination_ratio']:.2f} |"
        )
    print(json.dumps({name: figures for name, figures in rows}))


if __name__ == "__main__":
    main()
