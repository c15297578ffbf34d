"""The Airflow plugin: Conduit pages under ``/conduit``, shown inside Airflow's UI, and the operator link."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_conduit.plugins.app import app
from airflow_conduit.plugins.links import URL_PREFIX, ConduitPipelineLink

_PAGES = URL_PREFIX.lstrip("/")  # external views' hrefs are relative to the UI's base URL

DAG_RUN_HREF = f"{_PAGES}/airflow?dag_id={{DAG_ID}}&run_id={{RUN_ID}}"
"""The page of the pipeline that a DAG run ran (any of its tasks). The UI fills ``{DAG_ID}`` and
``{RUN_ID}`` (URL-encoded) for every destination but ``nav``; a DAG run's tab has no task, and the UI
would leave a ``{TASK_ID}`` placeholder as it is, so this href names none."""

TASK_INSTANCE_HREF = f"{DAG_RUN_HREF}&task_id={{TASK_ID}}&map_index={{MAP_INDEX}}"
"""The page of the pipeline that a task instance ran. ``{MAP_INDEX}`` stays as it is for a task that is
not mapped (the UI has no index to put there); the ``/airflow`` route then matches any index."""


def external_views() -> list[dict[str, Any]]:
    """Airflow 3 external views: pages framed by the UI (same origin), each at ``/plugin/{url_route}``.

    - the navigation entry (Browse), the list of pipelines;
    - a tab of every DAG run and of every task instance: the pipeline that run ran (its page, or a page
      saying none did).
    """
    return [
        {
            "name": "Conduit pipelines",
            "href": f"{_PAGES}/",
            "url_route": "conduit",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "Conduit pipeline",
            "href": DAG_RUN_HREF,
            "url_route": "conduit-dag-run",
            "destination": "dag_run",
        },
        {
            "name": "Conduit pipeline",
            "href": TASK_INSTANCE_HREF,
            "url_route": "conduit-task-instance",
            "destination": "task_instance",
        },
    ]


class ConduitPlugin(AirflowPlugin):
    """Registered through the ``airflow.plugins`` entry point of the distribution."""

    name = "conduit"
    fastapi_apps = [{"name": "conduit", "app": app, "url_prefix": URL_PREFIX}]
    external_views = external_views()
    operator_extra_links = [ConduitPipelineLink()]
