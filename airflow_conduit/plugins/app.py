"""The Conduit pages of the Airflow UI: a FastAPI app that the plugin mounts under ``/conduit``.

HTML (rendered with only what the page needs to boot; the browser fetches the data from the JSON API):

- ``/conduit/``: the pipelines of the configured state dirs;
- ``/conduit/pipelines/{id}``: one pipeline: charts of its batches, the recovery timeline, the audit log
  in words, the DLQ browser;
- ``/conduit/airflow?dag_id=&run_id=&task_id=&map_index=``: from an Airflow DAG run or task instance to
  the page of the pipeline it ran (307), else a page that says none ran there;
- ``/conduit/static/...``: the pages' scripts and styles.

JSON (every route takes ``state_dir`` to pick a state dir when several hold the pipeline id):

- ``/api/pipelines`` and ``/api/pipelines/{id}``: overviews and details;
- ``/api/pipelines/{id}/batches?range=hour|day|run``, ``/timeline``, ``/events?limit=``;
- ``/api/pipelines/{id}/dlq?code=&since=&until=&offset=&limit=``, ``/dlq/{entry_id}``;
- ``POST /api/pipelines/{id}/dlq/acknowledge`` and ``POST /api/pipelines/{id}/dlq/replay`` (``GET``: is
  one running), which write the audit log with the Airflow user's name.

The pages are Jinja2 templates (``templates/*.html``, shipped as package data), autoescaped.

The state dirs are the ``[conduit] state_dirs`` option (comma-separated; ``AIRFLOW__CONDUIT__STATE_DIRS``),
else ``$CONDUIT_STATE_DIR``, else ``./.conduit`` of the API server. Every route needs an authenticated
Airflow user (the UI's session cookie or a bearer token), as Airflow's own API does.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic import BaseModel, Field

from airflow_conduit import batch_log
from airflow_conduit.plugins import dlq_browser, event_text, replays, timeline
from airflow_conduit.plugins import overview as ov
from airflow_conduit.state import PipelineState, Status, format_time, parse_time

SECTION = "conduit"
STATE_DIRS_OPTION = "state_dirs"
REFRESH_SECONDS = 15
MAX_EVENTS = 1000
STATIC_DIR = Path(__file__).resolve().parent / "static"


def configured_state_dirs() -> list[str]:
    """The state dirs the UI reads, absolute, in configuration order."""
    from airflow.providers.common.compat.sdk import conf

    value = conf.get(SECTION, STATE_DIRS_OPTION, fallback=None) or os.environ.get("CONDUIT_STATE_DIR")
    dirs = [p.strip() for p in (value or ".conduit").split(",") if p.strip()]
    return [os.path.abspath(p) for p in dirs]


async def require_user(request: Request) -> Any:
    """Airflow's own authentication (``get_user``): a bearer token, else the UI's ``_token`` cookie.
    Returns the user (Airflow's ``BaseUser``): the actions write its name to the audit log.

    Imported at request time: the plugin module is loaded by every Airflow process, the API server's
    security module belongs only in the API server.
    """
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials

    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if token else None
    return await get_user(request, None, credentials)


CurrentUser = Annotated[Any, Depends(require_user)]
"""The signed-in Airflow user (FastAPI runs ``require_user`` once per request, app-wide and here)."""


def may_act_on(state: PipelineState, user: Any) -> None:
    """403 unless ``user`` may edit the DAG that ran the pipeline (any DAG when no DAG ran it).

    Acknowledging or replaying records changes what reaches the destinations, as clearing a task would,
    so a viewer of the page may not; the auth manager in use decides (``is_authorized_dag``, ``PUT``).
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    started = ov.latest_event(state, "started") or {}
    dag_id = (started.get("airflow") or {}).get("dag_id")
    if not get_auth_manager().is_authorized_dag(method="PUT", details=DagDetails(id=dag_id), user=user):
        what = f"DAG {dag_id!r}" if dag_id else "DAGs"
        raise HTTPException(
            status_code=403,
            detail=f"{user_name(user) or 'this user'} may not edit {what}: "
            f"acknowledging or replaying DLQ records of {state.pipeline_id!r} needs that permission",
        )


def user_name(user: Any) -> str:
    """The Airflow user's name for the audit log (``get_name()``, as Airflow's auth managers give it)."""
    try:
        name = user.get_name()
    except AttributeError:
        name = getattr(user, "username", None)
    return str(name or "")


app = FastAPI(
    title="Conduit pipelines",
    description="Status, batches, recovery timeline, audit log and DLQ of airflow-conduit pipelines.",
    dependencies=[Depends(require_user)],
)
app.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")


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


@app.get("/api/pipelines/{pipeline_id}", response_class=JSONResponse, name="pipeline_json")
def pipeline_json(pipeline_id: str, state_dir: str | None = None) -> dict[str, Any]:
    return ov.details(_pipeline(pipeline_id, state_dir))


RANGES = {"hour": timedelta(hours=1), "day": timedelta(days=1)}


@app.get("/api/pipelines/{pipeline_id}/batches", response_class=JSONResponse, name="batches_json")
def batches_json(
    pipeline_id: str,
    state_dir: str | None = None,
    range: Literal["hour", "day", "run"] = "run",  # noqa: A002 - the contract's query parameter
) -> dict[str, Any]:
    """The committed micro-batches of the last hour, day, or of the latest run (``batches.jsonl``)."""
    state = _pipeline(pipeline_id, state_dir)
    now = datetime.now(UTC)
    if range == "run":
        entries = batch_log.read_batches(state)
        latest = max((e.run_started_at for e in entries), default=None)
        entries = [e for e in entries if e.run_started_at == latest]
    else:
        entries = batch_log.read_batches(state, since=now - RANGES[range])
    return {"range": range, "now": format_time(now), "batches": [e.to_dict() for e in entries]}


@app.get("/api/pipelines/{pipeline_id}/timeline", response_class=JSONResponse, name="timeline_json")
def timeline_json(pipeline_id: str, state_dir: str | None = None) -> dict[str, Any]:
    """Runs with their faults, backoff waits, restarts and ends (see :mod:`.timeline`)."""
    return timeline.timeline(_pipeline(pipeline_id, state_dir).read_audit())


@app.get("/api/pipelines/{pipeline_id}/events", response_class=JSONResponse, name="events_json")
def events_json(
    pipeline_id: str, state_dir: str | None = None, limit: int = Query(50, ge=1, le=MAX_EVENTS)
) -> dict[str, Any]:
    """The last ``limit`` audit events, newest first, each in words."""
    events = ov.recent_events(_pipeline(pipeline_id, state_dir), limit)
    return {
        "events": [
            {
                "time": e.get("time"),
                "event": e.get("event"),
                "text": event_text.describe(e),
                "details": event_text.details(e),
            }
            for e in events
        ]
    }


def _moment(value: str | None, name: str) -> datetime | None:
    """A query's time: ISO-8601, UTC unless it names its zone (``datetime-local`` inputs name none)."""
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        raise HTTPException(status_code=400, detail=f"{name}: not an ISO-8601 time: {value!r}") from None


@app.get("/api/pipelines/{pipeline_id}/dlq", response_class=JSONResponse, name="dlq_json")
def dlq_json(
    pipeline_id: str,
    state_dir: str | None = None,
    code: str | None = None,
    since: str | None = None,
    until: str | None = None,
    offset: int = Query(0, ge=0),
    limit: int = Query(dlq_browser.DEFAULT_LIMIT, ge=1, le=dlq_browser.MAX_LIMIT),
) -> dict[str, Any]:
    """One page of the DLQ, newest first, filtered by error code and time (``since`` <= time < ``until``)."""
    state = _pipeline(pipeline_id, state_dir)
    page = dlq_browser.browse(
        state,
        code=code,
        since=_moment(since, "since"),
        until=_moment(until, "until"),
        offset=offset,
        limit=limit,
    )
    return page.to_dict()


class AcknowledgeRequest(BaseModel):
    ids: list[str] = Field(min_length=1)
    """DLQ entry ids (``FILE:LINE``)."""
    reason: str = ""


@app.post("/api/pipelines/{pipeline_id}/dlq/acknowledge", response_class=JSONResponse, name="dlq_acknowledge")
def dlq_acknowledge(
    pipeline_id: str,
    body: AcknowledgeRequest,
    user: CurrentUser,
    state_dir: str | None = None,
) -> dict[str, Any]:
    """Acknowledge DLQ entries: never written, never replayed; the audit log says who and why."""
    state = _pipeline(pipeline_id, state_dir)
    may_act_on(state, user)
    try:
        written = dlq_browser.acknowledge(state, body.ids, reason=body.reason, user=user_name(user))
    except KeyError as missing:
        raise HTTPException(
            status_code=404,
            detail=f"the DLQ of {pipeline_id!r} has no entry {missing.args[0]}: reload the page",
        ) from None
    return {"acknowledged": len(written)}


@app.get("/api/pipelines/{pipeline_id}/dlq/replay", response_class=JSONResponse, name="dlq_replay_status")
def dlq_replay_status(pipeline_id: str, state_dir: str | None = None) -> dict[str, Any]:
    """Whether a replay started here runs, and the latest replay's result (its ``replayed`` event)."""
    state = _pipeline(pipeline_id, state_dir)
    running = replays.running(state)
    return {
        "running": running is not None,
        "pid": running.pid if running else None,
        "log": str(replays.log_file(state)),
        "last": ov.latest_event(state, "replayed"),
    }


@app.post("/api/pipelines/{pipeline_id}/dlq/replay", response_class=JSONResponse, name="dlq_replay")
def dlq_replay(
    pipeline_id: str,
    user: CurrentUser,
    state_dir: str | None = None,
) -> dict[str, Any]:
    """Start ``airflow-conduit replay`` for the pipeline in the background, as the signed-in user."""
    state = _pipeline(pipeline_id, state_dir)
    may_act_on(state, user)
    try:
        started = replays.start(state, user=user_name(user))
    except replays.ReplayRefused as refused:
        raise HTTPException(status_code=409, detail=str(refused)) from None
    return {"started": True, "pid": started.pid, "log": str(started.log)}


# After /dlq/replay, so that "replay" is not taken for an entry id.
@app.get("/api/pipelines/{pipeline_id}/dlq/{entry_id}", response_class=JSONResponse, name="dlq_entry_json")
def dlq_entry_json(pipeline_id: str, entry_id: str, state_dir: str | None = None) -> dict[str, Any]:
    """One DLQ entry in full: the failed record, its error and node, the metadata, its state."""
    entry = dlq_browser.lookup(_pipeline(pipeline_id, state_dir), entry_id)
    if entry is None:
        raise HTTPException(status_code=404, detail=f"the DLQ of {pipeline_id!r} has no entry {entry_id!r}")
    return entry


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


def pipeline_href(request: Request, state: ov.PipelineOverview | PipelineState) -> str:
    path = request.url_for("pipeline_page", pipeline_id=state.pipeline_id).path
    return f"{path}?state_dir={quote(str(state.state_dir))}"


def api_urls(request: Request, pipeline_id: str | None = None) -> dict[str, str]:
    """The JSON API's URLs (paths, without the ``state_dir`` query: the page adds it from its boot data).

    ``dlq_entry`` ends in ``{id}``, for the page to replace with an entry id (URL-encoded).
    """
    urls = {"pipelines": request.url_for("pipelines_json").path}
    if pipeline_id is None:
        return urls
    names = {
        "pipeline": "pipeline_json",
        "batches": "batches_json",
        "timeline": "timeline_json",
        "events": "events_json",
        "dlq": "dlq_json",
        "dlq_acknowledge": "dlq_acknowledge",
        "dlq_replay": "dlq_replay",
    }
    urls.update({key: request.url_for(name, pipeline_id=pipeline_id).path for key, name in names.items()})
    urls["dlq_entry"] = urls["dlq"] + "/{id}"
    return urls


def boot(request: Request) -> dict[str, Any]:
    """What every page needs to boot: where the static files and the list are."""
    return {
        "static_url": request.url_for("static", path="").path,
        "index_href": request.url_for("index").path,
    }


@app.get("/", response_class=HTMLResponse, name="index")
def index(request: Request) -> HTMLResponse:
    dirs = configured_state_dirs()
    items = [ov.overview(s) for s in ov.find_pipelines(dirs)]
    return render(
        "index.html",
        **boot(request),
        title="Conduit pipelines",
        api=api_urls(request),
        state_dirs=dirs,
        pipelines=[(item, pipeline_href(request, item)) for item in items],
    )


@app.get("/pipelines/{pipeline_id}", response_class=HTMLResponse, name="pipeline_page")
def pipeline_page(request: Request, pipeline_id: str, state_dir: str | None = None) -> HTMLResponse:
    state = _pipeline(pipeline_id, state_dir)
    return render(
        "pipeline.html",
        **boot(request),
        title=f"Conduit pipeline {pipeline_id}",
        pipeline_id=pipeline_id,
        state_dir=str(state.state_dir),
        api=api_urls(request, pipeline_id),
        item=ov.overview(state),
    )


@app.get("/airflow", name="airflow_run")
def airflow_run(
    request: Request,
    dag_id: str,
    run_id: str | None = None,
    task_id: str | None = None,
    map_index: str | None = None,
) -> Response:
    """From an Airflow DAG run or task instance (the plugin's external views) to the page of the pipeline
    it ran: the latest ``started`` event with that Airflow context; else a page that says none ran there."""
    context = ov.AirflowContext(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    found = ov.pipeline_run_by(ov.find_pipelines(configured_state_dirs()), context)
    if found is not None:
        return RedirectResponse(pipeline_href(request, found), status_code=307)
    where = [(name, value) for name, value in (("DAG", dag_id), ("run", run_id), ("task", task_id)) if value]
    page = templates.get_template("no_pipeline.html").render(
        **boot(request), title="No Conduit pipeline", where=where
    )
    return HTMLResponse(page, status_code=404)
