"""The Conduit pages of the Airflow UI: a FastAPI app that the plugin mounts under ``/conduit``.

- ``/conduit/``: the pipelines of the configured state dirs, their status, counters and throughput;
- ``/conduit/pipelines/{id}``: one pipeline: last error, recovery, recent audit-log events, the DLQ
  with sample records and their errors, the metrics;
- ``/conduit/api/pipelines`` and ``/conduit/api/pipelines/{id}``: the same as JSON.

The state dirs are the ``[conduit] state_dirs`` option (comma-separated; ``AIRFLOW__CONDUIT__STATE_DIRS``),
else ``$CONDUIT_STATE_DIR``, else ``./.conduit`` of the API server. Every route needs an authenticated
Airflow user (the UI's session cookie or a bearer token), as Airflow's own API does.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from airflow_conduit.plugins import overview as ov
from airflow_conduit.state import PipelineState

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
def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.2rem;color:#1a202c;background:#fff}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:1.6rem}
table{border-collapse:collapse;margin:.4rem 0}th,td{border:1px solid #d5dbe3;padding:.3rem .6rem;text-align:left;
vertical-align:top;font-size:.9rem}th{background:#f1f4f8}
.status{display:inline-block;padding:.1rem .5rem;border-radius:.6rem;font-weight:600;color:#fff}
.running{background:#2f855a}.recovering{background:#b7791f}.degraded{background:#c53030}
.stopped{background:#4a5568}.failed{background:#dd6b20}.unknown{background:#a0aec0}
.error{border-left:4px solid #c53030;background:#fff5f5;padding:.5rem .8rem;margin:.4rem 0}
code,pre{font-family:ui-monospace,monospace;font-size:.85rem}pre{white-space:pre-wrap;margin:0}
.muted{color:#718096}
"""


def page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'>"
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def status_badge(status: str) -> str:
    css = status if status in ("running", "recovering", "degraded", "stopped", "failed") else "unknown"
    return f"<span class='status {css}' data-status='{esc(status)}'>{esc(status)}</span>"


def written_text(written: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{esc(k)}: {esc(v)}" for k, v in (written or {}).items()) or "-"


def error_text(error: Mapping[str, Any] | None) -> str:
    if not error:
        return ""
    node = f" at {esc(error.get('node'))}" if error.get("node") else ""
    return (
        f"<div class='error'><b>{esc(error.get('kind'))} {esc(error.get('code'))}</b>{node}: "
        f"<span class='error-message'>{esc(error.get('message'))}</span></div>"
    )


def pipeline_href(request: Request, state: ov.PipelineOverview) -> str:
    path = request.url_for("pipeline_page", pipeline_id=state.pipeline_id).path
    return f"{path}?state_dir={quote(state.state_dir)}"


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], css: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table class='{css}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@app.get("/", response_class=HTMLResponse)
def index(request: Request) -> HTMLResponse:
    dirs = configured_state_dirs()
    items = [ov.overview(s) for s in ov.find_pipelines(dirs)]
    rows = []
    for item in items:
        c = item.counters
        rows.append(
            [
                f"<a href='{esc(pipeline_href(request, item))}'>{esc(item.pipeline_id)}</a>",
                status_badge(item.status),
                *(esc(c.get(k, "-")) for k in ("read", "acked", "nacked", "dlq")),
                written_text(c.get("written")),
                esc(f"{item.throughput:,.1f}") if item.throughput is not None else "-",
                (error_text(item.error) if item.status in ("degraded", "failed", "recovering") else ""),
                esc(item.updated_at),
            ]
        )
    listing = (
        table(
            [
                "pipeline",
                "status",
                "read",
                "acked",
                "nacked",
                "dlq",
                "written",
                "records/s",
                "last error",
                "updated",
            ],
            rows,
            css="pipelines",
        )
        if rows
        else "<p>No pipelines in these state dirs yet.</p>"
    )
    dirs_text = ", ".join(f"<code>{esc(d)}</code>" for d in dirs)
    return page(
        "Conduit pipelines",
        f"<h1>Conduit pipelines</h1><p class='muted'>State dirs: {dirs_text}</p>{listing}",
    )


@app.get("/pipelines/{pipeline_id}", response_class=HTMLResponse, name="pipeline_page")
def pipeline_page(request: Request, pipeline_id: str, state_dir: str | None = None) -> HTMLResponse:
    state = _pipeline(pipeline_id, state_dir)
    data = ov.details(state)
    item = ov.overview(state)
    c = item.counters
    parts = [
        f"<p><a href='{esc(request.url_for('index').path)}'>All pipelines</a></p>",
        f"<h1>Pipeline {esc(item.pipeline_id)} {status_badge(item.status)}</h1>",
        f"<p class='muted'>State dir <code>{esc(state.root)}</code>, updated {esc(item.updated_at)}</p>",
    ]
    if item.error:
        parts.append("<h2>Last error</h2>" + error_text(item.error))
    if item.recovery:
        parts.append(
            "<h2>Recovery</h2>"
            + table(
                ["attempt", "next start", "delay (s)"],
                [[esc(item.recovery.get(k)) for k in ("attempt", "next_start_at", "delay")]],
            )
        )
    throughput = f"{item.throughput:,.1f}" if item.throughput is not None else "-"
    parts.append(
        "<h2>Counters</h2>"
        + table(
            ["read", "acked", "filtered", "nacked", "dlq", "written", "batches", "records/s"],
            [
                [
                    *(esc(c.get(k, "-")) for k in ("read", "acked", "filtered", "nacked", "dlq")),
                    written_text(c.get("written")),
                    esc(item.batches if item.batches is not None else "-"),
                    esc(throughput),
                ]
            ],
            css="counters",
        )
    )
    events = data["events"]
    parts.append(
        "<h2>Recent events</h2>"
        + table(
            ["time", "event", "details"],
            [
                [
                    esc(e.get("time")),
                    esc(e.get("event")),
                    "<pre>"
                    + esc(
                        json.dumps(
                            {k: v for k, v in e.items() if k not in ("time", "event", "pipeline")},
                            default=str,
                        )
                    )
                    + "</pre>",
                ]
                for e in events
            ],
            css="events",
        )
    )
    dlq = data["dlq"]
    parts.append(
        f"<h2>Dead-letter queue: <span class='dlq-count'>{esc(dlq['records'])}</span> record(s)</h2>"
        f"<p class='muted'>Error codes: {esc(', '.join(dlq['error_codes']) or '-')}; nodes: "
        f"{esc(', '.join(dlq['nodes']) or '-')}</p>"
    )
    if dlq["sample"]:
        parts.append(
            table(
                ["position", "node", "error", "record"],
                [
                    [
                        esc(e["position"]),
                        esc(e["node"]),
                        esc(e["error"]),
                        "<pre>" + esc(json.dumps(e["record"], default=str)[:2000]) + "</pre>",
                    ]
                    for e in dlq["sample"]
                ],
                css="dlq",
            )
        )
    metrics = data["metrics"]
    if metrics:
        shown = [(k, v) for k, v in metrics.items() if "_bucket{" not in k]
        parts.append(
            "<h2>Metrics</h2>"
            + table(
                ["sample", "value"],
                [[f"<code>{esc(k)}</code>", esc(f"{v:g}")] for k, v in shown],
                css="metrics",
            )
        )
    return page(f"Conduit pipeline {pipeline_id}", "".join(parts))
