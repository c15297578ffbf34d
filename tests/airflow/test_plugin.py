"""The UI plugin as Airflow loads it: registration, no pyspark, authentication, the operator link."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import VENV_BIN


def test_plugin_is_registered_without_pyspark(airflow_env):
    proc = subprocess.run(
        [str(VENV_BIN / "airflow"), "plugins", "-o", "json"],
        env=airflow_env.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    plugins = {p["name"]: p for p in json.loads(proc.stdout)}
    ours = plugins["conduit"]
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/conduit"]
    assert [(v["url_route"], v["destination"]) for v in ours["external_views"]] == [
        ("conduit", "nav"),
        ("conduit-dag-run", "dag_run"),
        ("conduit-task-instance", "task_instance"),
    ]
    assert ours["operator_extra_links"] == ["<airflow_conduit.plugins.links.ConduitPipelineLink object>"]

    code = textwrap.dedent(
        """
        import sys
        import airflow_conduit.plugins.conduit
        loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
        assert not loaded, loaded
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=airflow_env.env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-4000:]


def test_pages_need_an_airflow_user():
    from fastapi.testclient import TestClient

    from airflow_conduit.plugins.app import app

    client = TestClient(app)
    for path in ("/", "/api/pipelines", "/pipelines/orders"):
        assert client.get(path).status_code == 401, path


def test_operator_link_points_at_the_pipeline_page(tmp_path):
    from airflow_conduit.operators.pipeline import ConduitPipelineOperator
    from airflow_conduit.plugins.links import ConduitPipelineLink

    op = ConduitPipelineOperator(
        task_id="orders", pipeline_file="p.yaml", pipeline_id="orders", state_dir=str(tmp_path / "st ate")
    )
    links = [link for link in op.operator_extra_links if isinstance(link, ConduitPipelineLink)]
    assert [link.name for link in links] == ["Conduit pipeline"]
    url = links[0].get_link(op, ti_key=None)
    assert (
        url
        == f"/conduit/pipelines/orders?state_dir={str(tmp_path / 'st ate').replace('/', '%2F').replace(' ', '%20')}"
    )
