"""Which asset events Airflow stored, read through its REST API (v2), for the live DLQ watcher.

A trigger event becomes an asset event when the triggerer's supervisor stores it; the trigger hears of
that one state sync later. A triggerer stopped in between leaves the watcher unsure whether a DLQ write
it offered was stored. The trigger runs without database access, so it asks the API server
(:class:`AirflowAssetEventsHook`) instead of offering the write again
(:mod:`airflow_conduit.triggers.dlq_watch`).

The connection (type ``http``): host and port of the API server (``http://airflow-apiserver:8080``, or
host ``airflow-apiserver``, port 8080, schema ``http``), and a login and password when the auth manager
wants them (exchanged for a token at ``/auth/token``, the simple auth manager's endpoint). No login: no
token is asked for (the simple auth manager with all users admins).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
from airflow.sdk.bases.hook import BaseHook

PAGE = 100
"""Asset events per API request."""
SERVER_ERROR_TRIES = 10
SERVER_ERROR_WAIT = 3.0
"""Seconds between tries after a server error (a queued DAG run starts within a scheduler loop)."""


class AirflowAssetEventsHook(BaseHook):
    """Reads the asset events of one asset from Airflow's REST API.

    :param airflow_api_conn_id: the connection to the API server (see the module's docstring)
    :param timeout: seconds per HTTP request
    """

    conn_name_attr = "airflow_api_conn_id"
    default_conn_name = "conduit_airflow_api"
    conn_type = "http"
    hook_name = "Airflow REST API (Conduit DLQ watcher)"

    def __init__(self, airflow_api_conn_id: str = default_conn_name, timeout: float = 30.0) -> None:
        super().__init__()
        self.airflow_api_conn_id = airflow_api_conn_id
        self.timeout = timeout

    async def stored_event_payloads(self, uri: str, since: datetime) -> list[dict[str, Any]]:
        """The trigger payloads (``extra["payload"]``) of the events of asset ``uri`` stored at or after
        ``since``, oldest first; none when Airflow does not know the asset."""
        conn = await self.aget_connection(self.airflow_api_conn_id)
        base = base_url(conn.host or "", conn.port, conn.schema or "")
        async with httpx.AsyncClient(base_url=base, timeout=self.timeout) as client:
            if conn.login:
                client.headers["Authorization"] = f"Bearer {await _token(client, conn.login, conn.password)}"
            asset_id = await _asset_id(client, uri)
            if asset_id is None:
                return []
            payloads: list[dict[str, Any]] = []
            while True:
                page = await _events_page(client, asset_id, since, offset=len(payloads))
                events = page.get("asset_events") or []
                payloads += [((e.get("extra") or {}).get("payload") or {}) for e in events]
                if not events or len(payloads) >= int(page.get("total_entries") or 0):
                    return payloads


def base_url(host: str, port: int | None, schema: str) -> str:
    """The API server's URL from a connection's host (with or without a scheme), port and schema."""
    url = host if "://" in host else f"{schema or 'http'}://{host}"
    url = url.rstrip("/")
    if port and not url.rsplit("/", 1)[-1].count(":"):
        url += f":{port}"
    return url


async def _events_page(client: httpx.AsyncClient, asset_id: int, since: datetime, offset: int) -> Any:
    """One page of the asset's events. Airflow 3.3.2 answers 500 while an event's DAG run is queued
    (its ``created_dagruns`` fail validation without a ``start_date``): asked again a few times."""
    params: dict[str, str | int] = {
        "asset_id": asset_id,
        "timestamp_gte": since.isoformat(),
        "order_by": "timestamp",
        "limit": PAGE,
        "offset": offset,
    }
    for attempt in range(SERVER_ERROR_TRIES):
        response = await client.get("/api/v2/assets/events", params=params)
        if response.status_code < 500 or attempt == SERVER_ERROR_TRIES - 1:
            break
        await asyncio.sleep(SERVER_ERROR_WAIT)
    response.raise_for_status()
    return response.json()


async def _token(client: httpx.AsyncClient, login: str, password: str | None) -> str:
    response = await client.post("/auth/token", json={"username": login, "password": password or ""})
    response.raise_for_status()
    return str(response.json()["access_token"])


async def _asset_id(client: httpx.AsyncClient, uri: str) -> int | None:
    response = await client.get("/api/v2/assets", params={"uri_pattern": uri, "limit": PAGE})
    response.raise_for_status()
    for asset in response.json().get("assets") or []:
        if asset.get("uri") == uri:
            return int(asset["id"])
    return None
