"""webhook.http against an HTTP server on loopback that this test runs: what is sent (templated URL and
body, headers), what is saved (body, status), and Conduit's error rules: 5xx and timeouts are retried
with backoff and then nack; any other status is an answer (its body is saved, as Conduit does)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from airflow_conduit.config.settings.webhook import WebhookHttpSettings
from airflow_conduit.engine.processors._record_fields import RecordError
from airflow_conduit.engine.processors.webhook_http import backoff_delays, make


class Service:
    """A flaky service: answers the scripted statuses in turn (then 200), records every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: list[int] = []
        self.delay = 0.0

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        self.requests.append(
            {
                "method": handler.command,
                "path": handler.path,
                "headers": dict(handler.headers),
                "body": handler.rfile.read(length).decode(),
            }
        )
        time.sleep(self.delay)
        status = self.script.pop(0) if self.script else 200
        reply = json.dumps({"seen": handler.path, "status": status}).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Length", str(len(reply)))
            handler.end_headers()
            handler.wfile.write(reply)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out first


@pytest.fixture
def service() -> Iterator[tuple[Service, str]]:
    state = Service()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's names
            state.answer(self)

        do_POST = do_GET  # noqa: N815

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def record() -> dict[str, Any]:
    return {
        "position": b"7",
        "operation": "create",
        "metadata": {"table": "orders"},
        "key": b"k-7",
        "payload": {"before": None, "after": {"id": 7, "name": "Ann"}},
    }


def webhook(url: str, **settings: Any) -> Any:
    return make(
        WebhookHttpSettings.model_validate({"request.url": url, **settings}).model_dump(by_alias=True)
    )


def test_templated_request_and_saved_response(service):
    state, base = service
    process = webhook(
        base + "/{{ .Metadata.table }}?z=1&id={{ .Payload.After.id }}",
        **{
            "request.method": "POST",
            "request.body": "{{ toJson .Payload.After }}",
            "headers.Authorization": "Bearer t",
            "response.body": ".Payload.After.reply",
            "response.status": ".Metadata.status",
        },
    )
    out = process(record())
    [sent] = state.requests
    assert (sent["method"], sent["path"]) == ("POST", "/orders?id=7&z=1")  # query sorted, as Go encodes it
    assert json.loads(sent["body"]) == {"id": 7, "name": "Ann"}
    assert sent["headers"]["Authorization"] == "Bearer t"
    assert sent["headers"]["Content-Type"] == "application/json"
    assert out["metadata"]["status"] == "200"
    # A response body inside structured data is bytes to Conduit: base64 in its JSON.
    assert json.loads(base64.b64decode(out["payload"]["after"]["reply"])) == {
        "seen": "/orders?id=7&z=1",
        "status": 200,
    }


def test_the_whole_payload_becomes_the_raw_response_by_default(service):
    state, base = service
    out = webhook(base + "/x")(record())
    assert json.loads(out["payload"]["after"]) == {"seen": "/x", "status": 200}
    assert state.requests[0]["method"] == "GET" and state.requests[0]["body"] == ""


def test_5xx_is_retried_with_backoff_and_then_answers(service):
    state, base = service
    state.script = [503, 500]
    out = webhook(base + "/r", **{"backoffRetry.count": 2, "backoffRetry.min": "10ms"})(record())
    assert len(state.requests) == 3 and json.loads(out["payload"]["after"])["status"] == 200


def test_5xx_past_the_retries_nacks_and_4xx_is_an_answer(service):
    state, base = service
    state.script = [502, 502, 502]
    with pytest.raises(RecordError, match=r"error status code 502"):
        webhook(base + "/r", **{"backoffRetry.count": 2, "backoffRetry.min": "1ms"})(record())
    assert len(state.requests) == 3
    state.script = [404]
    out = webhook(base + "/missing", **{"response.status": ".Metadata.status"})(record())
    assert out["metadata"]["status"] == "404" and json.loads(out["payload"]["after"])["status"] == 404


def test_a_timeout_is_retried_then_nacks(service):
    state, base = service
    state.delay = 0.5
    started = time.monotonic()
    with pytest.raises(RecordError, match="error executing HTTP request"):
        webhook(
            base + "/slow", **{"request.timeout": "100ms", "backoffRetry.count": 1, "backoffRetry.min": "1ms"}
        )(record())
    assert len(state.requests) == 2 and time.monotonic() - started < 5


def test_backoff_follows_conduits_formula():
    assert backoff_delays(4, 2, 0.1, 0.5) == [0.1, 0.2, 0.4, 0.5]
    assert backoff_delays(0, 2, 0.1, 5) == []


def test_settings_refused_as_conduit_refuses_them():
    with pytest.raises(ValueError, match="response.body and response.status set to same field"):
        WebhookHttpSettings.model_validate({"request.url": "http://x", "response.status": ".Payload.After"})
    with pytest.raises(ValueError, match='use "headers.Content-Type" only'):
        WebhookHttpSettings.model_validate(
            {"request.url": "http://x", "request.contentType": "a/b", "headers.content-type": "c/d"}
        )
    with pytest.raises(ValueError, match="not a Go duration"):
        WebhookHttpSettings.model_validate({"request.url": "http://x", "backoffRetry.min": "soon"})
