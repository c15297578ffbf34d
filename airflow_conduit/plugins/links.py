"""The "Conduit pipeline" link of :class:`~airflow_conduit.operators.pipeline.ConduitPipelineOperator`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey  # the type BaseOperatorLink.get_link declares

URL_PREFIX = "/conduit"
"""Where the plugin mounts its pages on the API server."""


def pipeline_url(pipeline_id: str, state_dir: str | None = None, *, base_url: str = "") -> str:
    """The pipeline's page: ``{base_url}/conduit/pipelines/{id}?state_dir=...``.

    :param pipeline_id: the pipeline
    :param state_dir: its state dir (absolute), so the page picks it when several dirs hold that id
    :param base_url: the API server's ``[api] base_url``; empty gives a path on the UI's own server
    """
    url = f"{base_url.rstrip('/')}{URL_PREFIX}/pipelines/{quote(pipeline_id, safe='')}"
    if state_dir:
        url += f"?state_dir={quote(os.path.abspath(state_dir), safe='')}"
    return url


class ConduitPipelineLink(BaseOperatorLink):
    """Opens the pipeline's page of the Conduit plugin (status, audit log, DLQ, metrics).

    Airflow 3 computes the link in the worker when the task finishes and keeps it as an XCom, so it
    shows the state dir the task actually used (after templating).
    """

    name = "Conduit pipeline"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.providers.common.compat.sdk import conf

        base_url = conf.get("api", "base_url", fallback="") or ""
        # A base_url with only a path (or nothing) keeps the link on the server the UI came from.
        return pipeline_url(
            getattr(operator, "pipeline_id", ""), getattr(operator, "state_dir", None), base_url=base_url
        )
