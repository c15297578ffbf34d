"""``webhook.http``: Conduit's HTTP processor's settings (a request per record, retried with backoff).

Conduit's keys and defaults: ``request.url`` (a Go template), ``request.method`` (GET), ``request.body``
(a Go template; empty by default), ``headers.<Name>`` (``Content-Type`` defaults to ``application/json``;
the deprecated ``request.contentType`` is accepted), ``backoffRetry.count`` (0), ``backoffRetry.factor``
(2), ``backoffRetry.min`` (100ms), ``backoffRetry.max`` (5s), ``response.body`` (``.Payload.After``),
``response.status`` (not saved unless set). One extension: ``request.timeout`` (30s), because Conduit's
client waits forever for a server that never answers.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from ..spec import PluginSettings, PluginSpec
from ._common import GoTemplateText, check_ref, gather_prefixed, go_duration

_HEADERS = "headers"


class WebhookHttpSettings(PluginSettings):
    url: GoTemplateText = Field(alias="request.url", min_length=1)
    method: str = Field("GET", alias="request.method")
    body: GoTemplateText = Field("", alias="request.body")
    content_type: str = Field("", alias="request.contentType")
    headers: dict[str, str] = Field(default_factory=dict)
    retry_count: float = Field(0, ge=0, alias="backoffRetry.count")
    retry_factor: float = Field(2, gt=0, alias="backoffRetry.factor")
    retry_min: str = Field("100ms", alias="backoffRetry.min")
    retry_max: str = Field("5s", alias="backoffRetry.max")
    timeout: str = Field("30s", alias="request.timeout")
    response_body: str = Field(".Payload.After", alias="response.body")
    response_status: str = Field("", alias="response.status")

    @model_validator(mode="before")
    @classmethod
    def _collect_headers(cls, data: Any) -> Any:
        return gather_prefixed(data, _HEADERS)

    @field_validator("method")
    @classmethod
    def _check_method(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z]+", value):
            raise ValueError(f"not an HTTP method: {value!r}")
        return value

    @field_validator("retry_min", "retry_max", "timeout")
    @classmethod
    def _check_duration(cls, value: str) -> str:
        go_duration(value)
        return value

    @field_validator("response_body", "response_status")
    @classmethod
    def _check_ref(cls, value: str) -> str:
        if value:
            check_ref(value, forbid=("position",))
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> WebhookHttpSettings:
        named = any(name.lower() == "content-type" for name in self.headers)
        if named and self.content_type:
            raise ValueError(
                'cannot provide both "request.contentType" and "headers.Content-Type", use "headers.Content-Type" only'
            )
        if self.response_body == self.response_status:
            raise ValueError("response.body and response.status set to same field")
        return self

    def request_headers(self) -> dict[str, str]:
        """The headers sent: ``Content-Type`` from ``request.contentType``, else ``application/json``."""
        headers = dict(self.headers)
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = self.content_type or "application/json"
        return headers


WEBHOOK_HTTP = PluginSpec(
    "webhook.http",
    "processor",
    WebhookHttpSettings,
    engine="airflow_conduit.engine.processors.webhook_http",
    pure=False,  # a service: its answer can change, so a replayed batch reads its stored decisions
)
