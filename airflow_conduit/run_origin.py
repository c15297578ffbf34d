"""Which Airflow task instance started a run, as the engine sees it: plain environment variables (pure
Python; the engine never imports Airflow).

Airflow's task runner exports the task's context as ``AIRFLOW_CTX_*`` variables (``DAG_ID``,
``DAG_RUN_ID``, ``TASK_ID``, ``TRY_NUMBER``; Airflow's ``context_to_airflow_vars``) into the worker's
environment, which spark-submit inherits in client mode but which does not reach a driver that Spark
starts elsewhere (cluster mode), and which carries no map index. So the operator passes them to the job
itself (:func:`airflow_env`), with ``AIRFLOW_CTX_MAP_INDEX`` added (a name of ours, not Airflow's), and
the engine reads them back (:func:`airflow_context`) into its ``started`` audit event and ``status.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DAG_ID_ENV = "AIRFLOW_CTX_DAG_ID"
RUN_ID_ENV = "AIRFLOW_CTX_DAG_RUN_ID"
TASK_ID_ENV = "AIRFLOW_CTX_TASK_ID"
TRY_NUMBER_ENV = "AIRFLOW_CTX_TRY_NUMBER"
MAP_INDEX_ENV = "AIRFLOW_CTX_MAP_INDEX"
"""Not exported by Airflow: the Conduit operator sets it (``-1`` for a task that is not mapped)."""


def airflow_env(
    *, dag_id: str, run_id: str, task_id: str, try_number: int | None, map_index: int | None
) -> dict[str, str]:
    """The variables that tell the engine which task instance started it."""
    env = {DAG_ID_ENV: dag_id, RUN_ID_ENV: run_id, TASK_ID_ENV: task_id}
    if try_number is not None:
        env[TRY_NUMBER_ENV] = str(try_number)
    if map_index is not None:
        env[MAP_INDEX_ENV] = str(map_index)
    return env


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None and text.strip() else None
    except ValueError:
        return None


def airflow_context(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """``{dag_id, run_id, task_id, try_number, map_index}`` when Airflow started this run, else ``None``.

    ``try_number`` and ``map_index`` are ``None`` when not given (a hook used by another operator
    carries Airflow's variables only, which have no map index).
    """
    dag_id, run_id, task_id = (environ.get(n) for n in (DAG_ID_ENV, RUN_ID_ENV, TASK_ID_ENV))
    if not (dag_id and run_id and task_id):
        return None
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "try_number": _int_or_none(environ.get(TRY_NUMBER_ENV)),
        "map_index": _int_or_none(environ.get(MAP_INDEX_ENV)),
    }
