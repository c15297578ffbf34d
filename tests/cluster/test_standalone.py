"""The same pipeline on a Spark standalone cluster and on ``local[2]``: exactly once, same records.

The real CLI runs as a subprocess in client mode against the cluster of ``conftest.py``. Two generator
sources (several micro-batches each), field.set, filter, custom.python (from a directory that is on no
import path but the one the pipeline names) and json.encode feed a file destination. Every record the
filter keeps must arrive exactly once, in its source's order, and both runs must write the same records.
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from spark_standalone import SparkCluster

pytestmark = pytest.mark.cluster

CLI = Path(sys.executable).with_name("airflow-conduit")
PIPELINE_ID = "scale-out"
# (connector id, records, records per micro-batch)
SOURCES = (("orders", 180_000, 40_000), ("clicks", 120_000, 30_000))
DROP_EVERY = 7  # the filter drops keys divisible by this
CWD_KEY = "test.executor.cwd"  # where custom.python ran; differs between runs by design
READ_AT = "opencdc.readAt"  # the read time; differs between runs by design

PIPELINE = """\
version: "2.2"
pipelines:
  - id: scale-out
    connectors:
      - id: orders
        type: source
        plugin: builtin:generator
        settings:
          recordCount: {orders_count}
          maxRecordsPerBatch: {orders_batch}
          seed: 11
          collections: orders
          operations: create,update
          format.options.order_id: int
          format.options.customer: string
      - id: clicks
        type: source
        plugin: builtin:generator
        settings:
          recordCount: {clicks_count}
          maxRecordsPerBatch: {clicks_batch}
          seed: 22
          collections: clicks
          format.options.page: string
          format.options.ms: int
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {out}
    processors:
      - id: stage
        plugin: field.set
        settings:
          field: .Payload.After.route.stage
          value: scaled
      - id: drop-sevens
        plugin: filter
        condition: CAST(.Key AS BIGINT) % {drop_every} = 0
      - id: tag
        plugin: custom.python
        settings:
          function: cluster_udfs:tag
          path: {udfs}
      - id: route-as-text
        plugin: json.encode
        settings:
          field: .Payload.After.route
    dead-letter-queue:
      plugin: builtin:file
      settings:
        path: {dlq}
      window-size: 0
"""

# Not importable from the test's or the venv's sys.path: only the pipeline's `path` makes it so.
UDFS = f"""\
import os


def tag(record):
    key = int(record["key"])
    record["payload"]["after"]["bucket"] = key % 10
    record["metadata"]["{CWD_KEY}"] = os.getcwd()
    return record
"""


@dataclass(frozen=True)
class Run:
    payload: dict[str, Any]
    records: list[dict[str, Any]]
    stdout: str


def _run(master: str, root: Path, env: dict[str, str]) -> Run:
    root.mkdir(parents=True)
    udfs = root / "udfs"
    udfs.mkdir()
    (udfs / "cluster_udfs.py").write_text(UDFS)
    (orders, orders_count, orders_batch), (clicks, clicks_count, clicks_batch) = SOURCES
    pipeline = root / "pipeline.yaml"
    pipeline.write_text(
        PIPELINE.format(
            orders_count=orders_count,
            orders_batch=orders_batch,
            clicks_count=clicks_count,
            clicks_batch=clicks_batch,
            out=root / "out",
            dlq=root / "dlq",
            udfs=udfs,
            drop_every=DROP_EVERY,
        )
    )
    # The driver's cwd is not the executors': on the cluster they run in the worker's work dir.
    result = subprocess.run(
        [
            str(CLI),
            "run",
            str(pipeline),
            "--until-idle",
            "--master",
            master,
            "--state-dir",
            str(root / "state"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, (
        f"exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    records = []
    for path in sorted((root / "out").glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return Run(payload, records, result.stdout)


@pytest.fixture(scope="module")
def cluster_run(spark_cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(spark_cluster.master_url, tmp_path_factory.mktemp("on-cluster") / "run", spark_cluster.env)


@pytest.fixture(scope="module")
def local_run(spark_cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run("local[2]", tmp_path_factory.mktemp("on-local") / "run", spark_cluster.env)


def _source(record: dict[str, Any]) -> str:
    return record["metadata"]["conduit.source.connector.id"]


def _position(record: dict[str, Any]) -> int:
    return int(base64.b64decode(record["position"]))


def _by_source(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[_source(record)].append(record)
    return dict(grouped)


def _comparable(record: dict[str, Any]) -> str:
    """The OpenCDC JSON line without what differs between runs by design (read time, executor cwd)."""
    metadata = {k: v for k, v in record["metadata"].items() if k not in (READ_AT, CWD_KEY)}
    return json.dumps({**record, "metadata": metadata}, sort_keys=True)


def _expected_positions(count: int) -> list[int]:
    return [i for i in range(count) if i % DROP_EVERY != 0]


@pytest.mark.parametrize("which", ["cluster_run", "local_run"])
def test_every_record_exactly_once_in_source_order(which: str, request: pytest.FixtureRequest) -> None:
    run: Run = request.getfixturevalue(which)
    grouped = _by_source(run.records)
    assert sorted(grouped) == sorted(f"{PIPELINE_ID}:{name}" for name, _, _ in SOURCES)
    for name, count, _ in SOURCES:
        positions = [_position(r) for r in grouped[f"{PIPELINE_ID}:{name}"]]
        expected = _expected_positions(count)
        assert len(positions) == len(set(positions)), f"{name}: duplicates"
        assert set(expected) - set(positions) == set(), f"{name}: records missing"
        assert set(positions) - set(expected) == set(), f"{name}: filtered records written"
        assert positions == expected, f"{name}: out of source order"


@pytest.mark.parametrize("which", ["cluster_run", "local_run"])
def test_exit_payload_counts(which: str, request: pytest.FixtureRequest) -> None:
    run: Run = request.getfixturevalue(which)
    read = sum(count for _, count, _ in SOURCES)
    kept = sum(len(_expected_positions(count)) for _, count, _ in SOURCES)
    payload = run.payload
    assert payload["status"] == "stopped" and payload["exit_code"] == 0 and payload["error"] is None
    records = payload["records"]
    assert records["read"] == read
    assert records["filtered"] == read - kept
    assert records["nacked"] == 0 and records["dlq"] == 0
    assert records["written"] == {f"{PIPELINE_ID}:out": kept}
    # Admission control splits each source into several micro-batches.
    assert payload["batches"] >= max(math.ceil(count / per_batch) for _, count, per_batch in SOURCES)


def test_processors_applied(cluster_run: Run) -> None:
    for record in cluster_run.records:
        after = record["payload"]["after"]
        assert after["route"] == '{"stage":"scaled"}'  # field.set, then json.encode
        assert after["bucket"] == _position(record) % 10  # custom.python


def test_same_records_in_same_per_source_order(cluster_run: Run, local_run: Run) -> None:
    on_cluster, on_local = _by_source(cluster_run.records), _by_source(local_run.records)
    assert on_cluster.keys() == on_local.keys()
    for source in on_cluster:
        cluster_lines = [_comparable(r) for r in on_cluster[source]]
        local_lines = [_comparable(r) for r in on_local[source]]
        assert len(cluster_lines) == len(local_lines)
        assert cluster_lines == local_lines, f"{source}: records differ between the cluster and local runs"


def test_ran_on_the_cluster(spark_cluster: SparkCluster, cluster_run: Run, local_run: Run) -> None:
    state = spark_cluster.state()
    # One application ran on the cluster (the local run never talked to it), and it has finished.
    assert state["activeapps"] == []
    assert len(state["completedapps"]) == 1, state["completedapps"]
    app = state["completedapps"][0]
    assert app["state"] == "FINISHED"
    assert (spark_cluster.work_dir / app["id"]).is_dir()  # the worker started its executor there
    # custom.python ran in the cluster's executors (whose cwd is under the worker's work dir), with
    # its module imported from the pipeline's `path`; in the local run it ran beside the driver.
    cluster_cwds = {r["metadata"][CWD_KEY] for r in cluster_run.records}
    assert all(Path(cwd).is_relative_to(spark_cluster.work_dir / app["id"]) for cwd in cluster_cwds)
    local_cwds = {r["metadata"][CWD_KEY] for r in local_run.records}
    assert not any(Path(cwd).is_relative_to(spark_cluster.work_dir) for cwd in local_cwds)
