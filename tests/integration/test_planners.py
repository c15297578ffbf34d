"""Spark's idle Python planner daemons and workers stop once a pipeline's one source has planned its
read, and the next query in the same driver plans with new ones, which it keeps (``engine/planners.py``)."""

from __future__ import annotations

import json

import pytest

from airflow_conduit.engine import job
from airflow_conduit.engine.planners import PLANNER_MODULES, PlanningRuns

pytestmark = pytest.mark.spark

PIPELINE = """
version: "2.2"
pipelines:
  - id: planned-{name}
    connectors:
      - {id: in, type: source, plugin: builtin:file, settings: {path: "{tmp}/{name}.jsonl"}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/{name}-out"}}
    processors:
      - {id: decode, plugin: json.decode, settings: {field: .Payload.After}}
"""


def planner_processes(spark) -> tuple[list[int], list[int]]:
    """The driver's live planner daemons and planner workers (forked by a daemon, same command line)."""
    jvm_process = spark._jvm.java.lang.ProcessHandle.current()
    daemons, workers = [], []
    for handle in jvm_process.descendants().iterator():
        command = str(handle.info().commandLine().orElse(""))
        if handle.isAlive() and any(module in command for module in PLANNER_MODULES):
            forked = handle.parent().get().pid() != jvm_process.pid()
            (workers if forked else daemons).append(handle.pid())
    return daemons, workers


def test_idle_planners_stop_after_planning_and_the_next_query_plans_again(
    spark, run_yaml, tmp_path, monkeypatch
):
    # A process that has not stopped its planners yet (the tests share one driver).
    monkeypatch.setattr(job, "PLANNING", PlanningRuns())
    kept = {"first": False, "second": True}  # stopped once per process; the next query keeps its own
    for name in ("first", "second"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"n": n}) + "\n" for n in range(50)))
        payload = run_yaml(PIPELINE.replace("{name}", name), state_dir=tmp_path / name)
        # The second query planned after the first one's planners were stopped.
        assert payload["exit_code"] == 0 and payload["records"]["written"] == {f"planned-{name}:out": 50}, (
            payload
        )
        daemons, workers = planner_processes(spark)
        assert bool(daemons) == kept[name] and bool(workers) == kept[name], (daemons, workers)
