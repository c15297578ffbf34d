"""Throughput of ``builtin:s3`` beside boto3 doing the same bulk read and write in one process.

Against moto's S3 server on 127.0.0.1 (tests/servers/moto_s3.py), same run, same SparkSession:

(a) ``builtin:s3`` source -> ``builtin:file`` destination: ``n`` small objects (one record each), one
    ``--until-idle`` run of the engine (query start and the source's 2 s settle wait included);
(b) ``builtin:file`` source (``n`` lines) -> ``builtin:s3`` destination (``format: json``, an object
    per micro-batch), one ``--until-idle`` run;
(c) boto3 alone: list the ``n`` objects and GET each (the read ceiling); the same ``n`` records as
    OpenCDC JSON lines PUT as objects of ``BATCH`` lines (the write ceiling).

Printed as messages/s and the ratios (a)/(c_read), (b)/(c_write). ``bench(n)`` returns them as a dict.

    .venv/bin/python benchmarks/broker_s3.py [--records N]
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from brokers import figures, run_one  # noqa: E402  (this folder is on sys.path when run)

from tests.servers.moto_s3 import MotoS3  # noqa: E402

BATCH = 10_000

SOURCE_PIPELINE = """
version: "2.2"
pipelines:
  - id: bench-s3-read
    connectors:
      - id: bucket
        type: source
        plugin: builtin:s3
        settings:
SETTINGS      - {id: out, type: destination, plugin: builtin:file, settings: {path: "OUT"}}
"""

DESTINATION_PIPELINE = """
version: "2.2"
pipelines:
  - id: bench-s3-write
    connectors:
      - {id: lines, type: source, plugin: builtin:file, settings: {path: "IN", maxRecordsPerBatch: BATCH}}
      - id: bucket
        type: destination
        plugin: builtin:s3
        settings:
SETTINGS"""


def _run(spark: Any, yaml_text: str, work: Path) -> float:
    from airflow_conduit.config import load_pipeline_text
    from airflow_conduit.engine.job import RunOptions
    from airflow_conduit.engine.runner import run_pipeline

    config = load_pipeline_text(yaml_text, str(work / "pipeline.yaml")).pipelines[0]
    started = time.perf_counter()
    payload = run_pipeline(spark, config, work / "state", RunOptions(until_idle=True))
    elapsed = time.perf_counter() - started
    if payload["exit_code"] != 0:
        raise RuntimeError(f"benchmark run failed: {payload['error']}")
    return elapsed


def bench(n: int = 2000) -> dict[str, float]:
    from airflow_conduit.engine.session import get_session

    server = MotoS3()
    server.start()
    spark = get_session("local[2]")
    try:
        s3 = server.client()
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            read_bucket, write_bucket, ceiling_bucket = server.bucket(), server.bucket(), server.bucket()
            for i in range(n):
                s3.put_object(Bucket=read_bucket, Key=f"in/{i:08d}", Body=json.dumps({"i": i}).encode())

            # (c_read) boto3: list and get every object
            started = time.perf_counter()
            got = 0
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=read_bucket, Prefix="in/"):
                for item in page.get("Contents", []):
                    s3.get_object(Bucket=read_bucket, Key=item["Key"])["Body"].read()
                    got += 1
            c_read = got / (time.perf_counter() - started)

            # (a) builtin:s3 -> builtin:file
            source_yaml = SOURCE_PIPELINE.replace(
                "SETTINGS", server.settings(read_bucket, prefix="in/", maxRecordsPerBatch=str(BATCH))
            ).replace("OUT", str(work / "read-out"))
            (work / "a").mkdir()
            a = n / _run(spark, source_yaml, work / "a")

            # (b) builtin:file -> builtin:s3
            lines = work / "lines.txt"
            lines.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(n)))
            destination_yaml = (
                DESTINATION_PIPELINE.replace(
                    "SETTINGS", server.settings(write_bucket, format="json", prefix="out")
                )
                .replace("IN", str(lines))
                .replace("BATCH", str(BATCH))
            )
            (work / "b").mkdir()
            b = n / _run(spark, destination_yaml, work / "b")

            # (c_write) boto3: the same records as OpenCDC JSON lines, an object per BATCH
            started = time.perf_counter()
            raw = lines.read_bytes().splitlines()
            for first in range(0, n, BATCH):
                body = "".join(
                    json.dumps(
                        {
                            "position": base64.b64encode(f"lines.txt:{i}".encode()).decode(),
                            "operation": "create",
                            "metadata": {"file.path": str(lines)},
                            "key": base64.b64encode(str(i + 1).encode()).decode(),
                            "payload": {"before": None, "after": base64.b64encode(raw[i]).decode()},
                        }
                    )
                    + "\n"
                    for i in range(first, min(n, first + BATCH))
                )
                s3.put_object(Bucket=ceiling_bucket, Key=f"out/{first:012d}.json", Body=body.encode())
            c_write = n / (time.perf_counter() - started)
    finally:
        server.stop()
    return figures(n, a, b, c_read, c_write)


def main() -> None:
    run_one("s3", bench)


if __name__ == "__main__":
    main()
