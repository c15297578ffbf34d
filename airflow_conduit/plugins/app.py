"""The Conduit pages of the Airflow UI: a FastAPI app that the plugin mounts under ``/conduit``.

- ``/conduit/``: the pipelines of the configured state dirs, their status, counters and throughput;
- ``/conduit/pipelines/{id}``: one pipeline: last error, recovery, recent audit-log events, the DLQ
  with sample records and their errors, the metrics;
- ``/conduit/api/pipelines`` and ``/conduit/api/pipelines/{id}``: the same as JSON.

The pages are Jinja2 templates (``templates/*.html``, shipped as package data), autoescaped.

The state dirs are the ``[conduit] state_dirs`` option (comma-separated; ``AIRFLOW__CONDUIT__STATE_DIRS``),
else ``$CONDUIT_STATE_DIR``, else ``./.conduit`` of the API server. Every route needs an authenticated
Airflow user (the UI's session cookie or a bearer token), as Airflow's own API does.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from airflow_conduit.plugins import overview as ov
from airflow_conduit.state import PipelineState, Status

SECTION = "conduit"
STATE_DIRS_OPTION = "state_dirs"
REFRESH_SECONDS = 15


def configured_state_dirs() -> list[str]:
    """The state dirs the UI reads, absolute, in configuration order."""
    from airflow.providers.common.compat.sdk import conf

    value = conf.get(SECTION, STATE_DIRS_OPTION, fallback=None) or os.environ.get("CONDUIT_STATE_DIR")
    dirs = [p.strip() for p in (value or ".conduit").split(",") if p.strip()]
    return [os.path.abspath(p) for p in dirs]


async def require_user(request: Request) -> None:
    """Airflow's own authentication (``get_user``): a bearer token, else the UI's ``_token`` cookie.

    Imported at request time: the plugin module is loaded by every Airflow process, the API server's
    security module belongs only in the API server.
    """
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials

    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if token else None
    await get_user(request, None, credentials)


app = FastAPI(
    title="Conduit pipelines",
    description="Status, audit log, DLQ and metrics of airflow-conduit pipelines.",
    dependencies=[Depends(require_user)],
)


def _pipeline(pipeline_id: str, state_dir: str | None) -> PipelineState:
    state = ov.find_pipeline(configured_state_dirs(), pipeline_id, state_dir)
    if state is None:
        where = f" in {state_dir}" if state_dir else ""
        raise HTTPException(status_code=404, detail=f"no pipeline {pipeline_id!r}{where} in the state dirs")
    return state


# JSON ------------------------------------------------------------------------------------------------
@app.get("/api/pipelines", response_class=JSONResponse)
def pipelines_json() -> dict[str, Any]:
    dirs = configured_state_dirs()
    return {"state_dirs": dirs, "pipelines": [ov.overview(s).to_dict() for s in ov.find_pipelines(dirs)]}


@app.get("/api/pipelines/{pipeline_id}", response_class=JSONResponse)
def pipeline_json(pipeline_id: str, state_dir: str | None = None) -> dict[str, Any]:
    return ov.details(_pipeline(pipeline_id, state_dir))


# HTML ------------------------------------------------------------------------------------------------
STATUSES = tuple(Status)
"""The statuses with a colour of their own; anything else is shown as ``unknown``."""
ERROR_STATUSES = (Status.DEGRADED, Status.FAILED, Status.RECOVERING)
"""The statuses whose last error the list shows."""


def _rate(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else "-"


# Autoescaping for every *.html template, so no value reaches the page unescaped and none is escaped twice;
# None prints as nothing (not "None"), as a missing value always did on these pages.
templates = Environment(
    loader=PackageLoader("airflow_conduit.plugins", "templates"),
    autoescape=select_autoescape(),
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=lambda value: "" if value is None else value,
)
templates.filters["rate"] = _rate
templates.globals.update(refresh_seconds=REFRESH_SECONDS, statuses=STATUSES, error_statuses=ERROR_STATUSES)


def render(template: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(templates.get_template(template).render(**context))


def pipeline_href(request: Request, state: ov.PipelineOverview) -> str:
    path = request.url_for("pipeline_page", pipeline_id=state.pipeline_id).path
    return f"{path}?state_dir={quote(state.state_dir)}"


@app.get("/", response_class=HTMLResponse)
def index(request: Request) -> HTMLResponse:
    dirs = configured_state_dirs()
    items = [ov.overview(s) for s in ov.find_pipelines(dirs)]
    return render(
        "index.html",
        title="Conduit pipelines",
        state_dirs=dirs,
        pipelines=[(item, pipeline_href(request, item)) for item in items],
    )


@app.get("/pipelines/{pipeline_id}", response_class=HTMLResponse, name="pipeline_page")
def pipeline_page(request: Request, pipeline_id: str, state_dir: str | None = None) -> HTMLResponse:
    state = _pipeline(pipeline_id, state_dir)
    data = ov.details(state)
    events = [
        {
            **e,
            "details": json.dumps(
                {k: v for k, v in e.items() if k not in ("time", "event", "pipeline")}, default=str
            ),
        }
        for e in data["events"]
    ]
    dlq = data["dlq"]
    sample = [{**e, "record_json": json.dumps(e["record"], default=str)[:2000]} for e in dlq["sample"]]
    return render(
        "pipeline.html",
        title=f"Conduit pipeline {pipeline_id}",
        index_href=request.url_for("index").path,
        item=ov.overview(state),
        state_root=state.root,
        events=events,
        dlq={**dlq, "sample": sample},
        # Histogram buckets would fill the page; their sums and counts stay.
        metrics=[(k, f"{v:g}") for k, v in data["metrics"].items() if "_bucket{" not in k],
    )
