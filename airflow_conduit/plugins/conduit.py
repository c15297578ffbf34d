"""The Airflow plugin: Conduit pages under ``/conduit``, a navigation entry, the operator link."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_conduit.plugins.app import app
from airflow_conduit.plugins.links import URL_PREFIX, ConduitPipelineLink


class ConduitPlugin(AirflowPlugin):
    """Registered through the ``airflow.plugins`` entry point of the distribution."""

    name = "conduit"
    fastapi_apps = [{"name": "conduit", "app": app, "url_prefix": URL_PREFIX}]
    # Shown in Airflow's navigation, the list page framed inside the UI (``/plugin/conduit``).
    external_views = [
        {
            "name": "Conduit pipelines",
            "href": f"{URL_PREFIX.lstrip('/')}/",
            "url_route": "conduit",
            "destination": "nav",
            "category": "browse",
        }
    ]
    operator_extra_links = [ConduitPipelineLink()]
