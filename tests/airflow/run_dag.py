"""Run one DAG with Airflow's ``dag.test()`` and write what happened as JSON (run in a subprocess).

Usage: ``python run_dag.py DAG_FILE DAG_ID OUT_JSON``. The environment must already point Airflow at
a migrated metadata DB (``AIRFLOW_HOME``) and at a DAGs folder holding DAG_FILE.

``CONDUIT_TEST_TASK_PATCH`` (JSON ``{task_id: {attribute: value}}``) changes tasks of the loaded DAG
before the run: ``dag.test()`` runs one task at a time and a deferred trigger inline, so a sensor that
watches a task running beside it in the same DAG must poke in reschedule mode there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path


def load_dag(dag_file: str, dag_id: str):
    from airflow.sdk import DAG

    spec = importlib.util.spec_from_file_location(f"_dag_under_test_{Path(dag_file).stem}", dag_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if isinstance(value, DAG) and value.dag_id == dag_id:
            return value
    raise SystemExit(f"no DAG {dag_id} in {dag_file}")


def collect(dag_id: str, run_id: str) -> dict:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out: dict = {"tasks": {}, "xcom": {}, "asset_events": []}
    with create_session() as session:
        for ti in session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        ):
            out["tasks"][ti.task_id] = {
                "state": str(ti.state.value if hasattr(ti.state, "value") else ti.state),
                "try_number": ti.try_number,
                "max_tries": ti.max_tries,
            }
        for h in session.scalars(
            select(TaskInstanceHistory).where(
                TaskInstanceHistory.dag_id == dag_id, TaskInstanceHistory.run_id == run_id
            )
        ):
            out["tasks"].setdefault(h.task_id, {}).setdefault("history", []).append(
                {"try_number": h.try_number, "state": str(getattr(h.state, "value", h.state))}
            )
        for x in session.scalars(
            select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id)
        ):
            out["xcom"].setdefault(x.task_id, {})[x.key] = XComModel.deserialize_value(x)
        rows = session.execute(
            select(AssetEvent, AssetModel.uri, AssetModel.group)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetEvent.source_dag_id == dag_id, AssetEvent.source_run_id == run_id)
        )
        for event, uri, group in rows:
            out["asset_events"].append(
                {"uri": uri, "group": group, "extra": event.extra, "task_id": event.source_task_id}
            )
    return out


def main(dag_file: str, dag_id: str, out_file: str) -> int:
    started = time.monotonic()
    dag = load_dag(dag_file, dag_id)
    for task_id, attributes in json.loads(os.environ.get("CONDUIT_TEST_TASK_PATCH", "{}")).items():
        for name, value in attributes.items():
            setattr(dag.get_task(task_id), name, value)
    dag_run = dag.test()
    result = {
        "dag_id": dag_id,
        "run_id": dag_run.run_id,
        "state": str(getattr(dag_run.state, "value", dag_run.state)),
        "seconds": round(time.monotonic() - started, 1),
    }
    result.update(collect(dag_id, dag_run.run_id))
    Path(out_file).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
