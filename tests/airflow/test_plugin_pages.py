"""The Conduit pages as HTML (Jinja2 templates, autoescaped): every value escaped exactly once."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from airflow_conduit.state import PipelineState

MARKUP = "<script>alert('&\"x')</script>"
ESCAPED = "&lt;script&gt;alert(&#39;&amp;&#34;x&#39;)&lt;/script&gt;"


@pytest.fixture
def client(tmp_path, monkeypatch) -> Iterator[object]:
    from fastapi.testclient import TestClient

    from airflow_conduit.plugins.app import app, require_user

    monkeypatch.setenv("AIRFLOW__CONDUIT__STATE_DIRS", str(tmp_path / "state"))
    app.dependency_overrides[require_user] = lambda: None  # authentication is test_plugin.py's
    try:
        yield TestClient(app)
    finally:
        app.dependency_overrides.pop(require_user, None)


def test_markup_in_state_is_escaped_once(client, tmp_path):
    state = PipelineState.of(tmp_path / "state", "odd")
    error = {"kind": "transient", "code": "io", "message": MARKUP, "node": None}
    state.audit("fault", message=MARKUP)
    state.write_status("recovering", error=error, counters={"read": 5, "written": {"a<b": 2}}, attempt=2)
    (state.root / "metrics.prom").write_text(
        'conduit_x_total{n="<&>"} 1.5e+06\nconduit_x_bucket{le="1.0"} 2\n'
    )

    listing = client.get("/").text
    assert f'<span class="error-message">{ESCAPED}</span>' in listing
    assert "a&lt;b: 2" in listing
    assert "&amp;lt;" not in listing and "&amp;#" not in listing

    page = client.get("/pipelines/odd").text
    assert f'<span class="error-message">{ESCAPED}</span>' in page
    # Events and metrics are no longer in the HTML: the page's script fetches them as JSON (as text).
    assert "&amp;lt;" not in page and "&amp;#" not in page
    assert " at None" not in page and "None" not in page  # no node, no delay: nothing printed
    assert '<span class="status recovering" data-status="recovering">recovering</span>' in page


def test_unknown_status_and_an_empty_state_dir(client, tmp_path):
    assert "No pipelines in these state dirs yet." in client.get("/").text

    PipelineState.of(tmp_path / "state", "new").write_status("starting", counters={})
    listing = client.get("/").text
    assert '<span class="status unknown" data-status="starting">starting</span>' in listing
    assert client.get("/pipelines/nope").status_code == 404


def test_a_pipeline_with_only_an_exit_payload(client, tmp_path):
    """No status.json (an engine that ended before writing one): status, error and rate from exit.json."""
    PipelineState.of(tmp_path / "state", "ended").write_exit_payload(
        {
            "pipeline": "ended",
            "status": "failed",
            "exit_code": 75,
            "error": {"kind": "transient", "code": "io", "message": "lost the source"},
            "records": {"read": 10, "acked": 10, "filtered": 0, "nacked": 0, "dlq": 0, "written": {}},
            "started_at": "2026-01-01T00:00:00Z",
            "ended_at": "2026-01-01T00:00:04Z",
        }
    )
    listing = client.get("/").text
    assert '<span class="status failed" data-status="failed">failed</span>' in listing
    assert '<span class="error-message">lost the source</span>' in listing
    assert '<td class="num">2.5</td>' in listing  # 10 records in 4 s
    item = client.get("/api/pipelines/ended").json()
    assert (item["status"], item["throughput"], item["counters"]["read"]) == ("failed", 2.5, 10)


def test_boot_data_and_the_id_with_markup(client, tmp_path):
    """The id reaches the heading escaped once and the boot JSON (read by conduit.js) intact, in a
    script element that no value can end (tojson escapes <, >, & and ')."""
    pipeline_id = "a<b>'&\"c"
    PipelineState.of(tmp_path / "state", pipeline_id).write_status("running", counters={"read": 1})
    page = client.get(f"/pipelines/{quote(pipeline_id, safe='')}").text
    assert '<span class="pipeline-id">a&lt;b&gt;&#39;&amp;&#34;c</span>' in page
    boot_text = re.search(r'<script id="conduit-boot" type="application/json">(.*?)</script>', page, re.S)
    assert boot_text is not None
    assert not set("<>&'") & set(boot_text.group(1))
    boot = json.loads(boot_text.group(1))
    assert (boot["page"], boot["pipeline_id"], boot["state_dir"]) == (
        "pipeline",
        pipeline_id,
        str(tmp_path / "state"),
    )
    assert boot["api"]["timeline"].endswith("/timeline")
    for hook in ('id="chart-throughput"', 'id="timeline"', 'id="events"', 'id="dlq"', 'id="dlq-record"'):
        assert hook in page
