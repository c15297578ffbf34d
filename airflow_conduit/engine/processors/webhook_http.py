"""``webhook.http``: an HTTP request per record, as Conduit's processor sends it: the URL and body are Go
templates over the record; a network error, a timeout or a status of 500 or more is retried with
exponential backoff (``backoffRetry.*``) and then nacks the record; any other response's body (and, when
``response.status`` is set, its status) is written into the record.
"""

from __future__ import annotations

import base64
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import parse_field_ref
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings._common import go_duration
from airflow_conduit.config.settings.webhook import WebhookHttpSettings
from airflow_conduit.engine.processors import _record_fields as fields
from airflow_conduit.engine.processors.custom_python import apply_builtin
from airflow_conduit.gotemplate import Template, TemplateExecError, is_template
from airflow_conduit.gotemplate.opencdc import from_record_dict

RecordError = fields.RecordError


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def backoff_delays(count: float, factor: float, minimum: float, maximum: float) -> list[float]:
    """The waits before each retry (``jpillora/backoff`` without jitter): ``min * factor**n``, at most
    ``max``; ``count`` retries."""
    delays = []
    attempt = 0
    while attempt < count:
        delays.append(min(minimum * factor**attempt, maximum))
        attempt += 1
    return delays


def _normalised_url(url: str) -> str:
    """As Go re-encodes the query after the template (``url.ParseQuery`` then ``Encode``: sorted keys)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.query:
        return url
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    encoded = urllib.parse.urlencode(sorted(query, key=lambda pair: pair[0]))
    return urllib.parse.urlunsplit(parts._replace(query=encoded))


class _Sender:
    def __init__(self, settings: WebhookHttpSettings) -> None:
        self.settings = settings
        self.url = Template.parse(settings.url) if is_template(settings.url) else None
        self.body = Template.parse(settings.body) if is_template(settings.body) else None
        self.headers = settings.request_headers()
        self.timeout = go_duration(settings.timeout) or None
        self.body_ref = parse_field_ref(settings.response_body)
        self.status_ref = parse_field_ref(settings.response_status) if settings.response_status else None
        self.delays = backoff_delays(
            settings.retry_count,
            settings.retry_factor,
            go_duration(settings.retry_min),
            go_duration(settings.retry_max),
        )

    def request(self, record: dict[str, Any]) -> urllib.request.Request:
        view = from_record_dict(record)
        try:
            url = _normalised_url(self.url.execute(view)) if self.url else self.settings.url
        except TemplateExecError as error:
            raise RecordError(f"error while evaluating URL template: {error}") from None
        try:
            body = self.body.execute(view).encode() if self.body else self.settings.body.encode()
        except TemplateExecError as error:
            raise RecordError(
                f"cannot create HTTP request: failed getting request body: "
                f"error while evaluating request body template: {error}"
            ) from None
        return urllib.request.Request(
            url, data=body or None, headers=self.headers, method=self.settings.method.upper()
        )

    def send_once(self, request: urllib.request.Request) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - the user's URL
                return response.status, response.read()
        except urllib.error.HTTPError as answered:  # a status urllib calls an error is still an answer
            status, body = answered.code, answered.read()
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise RecordError(f"error executing HTTP request: {reason}") from None
        if status >= 500:
            raise RecordError(f"error status code {status} (body: {body.decode(errors='replace')!r})")
        return status, body

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        request = self.request(record)
        for delay in [*self.delays, None]:
            try:
                status, body = self.send_once(request)
                break
            except RecordError:
                if delay is None:
                    raise
                time.sleep(delay)
        self._save(record, self.body_ref, body)
        if self.status_ref is not None:
            self._save(record, self.status_ref, str(status))
        return record

    @staticmethod
    def _save(record: dict[str, Any], ref: Any, value: bytes | str) -> None:
        if isinstance(value, bytes) and not (ref.is_data and not ref.path):
            # A []byte inside structured data is base64 in Conduit's JSON; metadata holds its text.
            value = (
                value.decode(errors="replace") if ref.root == "metadata" else base64.b64encode(value).decode()
            )
        try:
            fields.set_value(record, ref, value)
        except RecordError as error:
            raise RecordError(f"failed setting response: {error}") from None


def make(settings: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return _Sender(WebhookHttpSettings.model_validate(settings))
