"""Throughput of the broker and object-store connectors, each beside its own client (the ceiling).

For each of S3 (moto's server), NATS JetStream, Redis Streams and RabbitMQ, on a throwaway server on
127.0.0.1 started by the benchmark, in one process and one SparkSession per connector:

(a) the connector's source -> the file destination, one ``--until-idle`` run;
(b) the file source -> the connector's destination, one ``--until-idle`` run;
(c) the broker's own Python client doing the same bulk read and the same bulk write (the ceiling).

Printed as messages/s and the ratios (a)/(c read) and (b)/(c write), measured in the same run: the
machine is shared and noisy, so absolute rates drift and the ratios are what to compare. Each
connector's script (``broker_<name>.py [--records N]``) runs alone too and says exactly what it times.

    .venv/bin/python benchmarks/brokers.py [--records N] [--only s3,nats,redis,rabbitmq]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONNECTORS = ("s3", "nats", "redis", "rabbitmq")
# S3 holds one record per object: a GET per record, so it gets fewer records in the same time.
DEFAULT_RECORDS = {"s3": 2_000, "nats": 50_000, "redis": 50_000, "rabbitmq": 50_000}
HEADER = (
    "| connector | messages | source → file msg/s | client read msg/s | ratio "
    "| file → destination msg/s | client write msg/s | ratio |\n|---|---|---|---|---|---|---|---|"
)


def figures(n: int, source: float, destination: float, read: float, write: float) -> dict[str, float]:
    """One connector's figures (messages/s) and its two ratios, as every ``broker_<name>.bench`` returns them."""
    return {
        "records": n,
        "source_to_file_msgs_per_s": source,
        "file_to_destination_msgs_per_s": destination,
        "client_read_msgs_per_s": read,
        "client_write_msgs_per_s": write,
        "source_ratio": source / read,
        "destination_ratio": destination / write,
    }


def row(name: str, f: dict[str, Any]) -> str:
    return (
        f"| {name} | {int(f['records']):,} | {f['source_to_file_msgs_per_s']:,.0f} "
        f"| {f['client_read_msgs_per_s']:,.0f} | {f['source_ratio']:.3f} "
        f"| {f['file_to_destination_msgs_per_s']:,.0f} | {f['client_write_msgs_per_s']:,.0f} "
        f"| {f['destination_ratio']:.3f} |"
    )


def run_one(name: str, bench: Callable[[int], dict[str, Any]]) -> None:
    """A connector script's ``main``: ``--records N``, then its row and its figures as JSON (last line)."""
    parser = argparse.ArgumentParser(description=f"{name}: the connector beside its client")
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS[name])
    figures = bench(parser.parse_args().records)
    print(HEADER)
    print(row(name, figures))
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="messages per connector (default: per connector)")
    parser.add_argument("--only", default=",".join(CONNECTORS), help="comma-separated connectors")
    args = parser.parse_args()
    rows = []
    for name in args.only.split(","):
        n = args.records or DEFAULT_RECORDS[name]
        print(f"{name}: {n:,} messages ...", file=sys.stderr, flush=True)
        # A process per connector: each starts and stops its own server and SparkSession.
        done = subprocess.run(
            [sys.executable, str(HERE / f"broker_{name}.py"), "--records", str(n)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{name}: the benchmark failed (exit {done.returncode})")
        rows.append((name, json.loads(done.stdout.strip().splitlines()[-1])))
    print(HEADER)
    for name, figures in rows:
        print(row(name, figures))
    print(json.dumps(dict(rows)))


if __name__ == "__main__":
    main()
