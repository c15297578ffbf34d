"""The provider as Airflow sees it: discovery, the [conduit] section, the asset scheme, DAG parsing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, VENV_BIN


def airflow_cli(airflow_env, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(VENV_BIN / "airflow"), *args],
        env={**airflow_env.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_provider_is_listed(airflow_env):
    providers = json.loads(airflow_cli(airflow_env, "providers", "list", "-o", "json"))
    ours = [p for p in providers if p["package_name"] == "airflow-conduit"]
    assert ours, [p["package_name"] for p in providers]
    assert ours[0]["description"].startswith("Conduit-style streaming pipelines")


def test_triggers_are_registered(airflow_env):
    triggers = json.loads(airflow_cli(airflow_env, "providers", "triggers", "-o", "json"))
    modules = {t["class"] for t in triggers if t["package_name"] == "airflow-conduit"}
    assert modules == {"airflow_conduit.triggers.recovery", "airflow_conduit.triggers.status"}


def test_conduit_config_section_defaults_and_env(airflow_env):
    assert airflow_cli(airflow_env, "config", "get-value", "conduit", "max_retries").strip() == "-1"
    assert airflow_cli(airflow_env, "config", "get-value", "conduit", "min_delay").strip() == "1s"
    out = airflow_cli(
        airflow_env,
        "config",
        "get-value",
        "conduit",
        "max_retries",
        env={"AIRFLOW__CONDUIT__MAX_RETRIES": "7"},
    )
    assert out.strip() == "7"


def test_policy_from_airflow_config(airflow_env):
    code = textwrap.dedent(
        """
        from airflow_conduit.hooks.config import policy_from_airflow_config
        p = policy_from_airflow_config()
        print(p.min_delay.total_seconds(), p.max_delay.total_seconds(), p.backoff_factor,
              p.max_retries, p.max_retries_window.total_seconds())
        """
    )
    env = {**airflow_env.env, "AIRFLOW__CONDUIT__MIN_DELAY": "250ms", "AIRFLOW__CONDUIT__MAX_RETRIES": "4"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["0.25", "600.0", "2.0", "4", "300.0"]


def test_conduit_asset_uris_are_checked(airflow_env):
    code = textwrap.dedent(
        """
        from airflow.sdk import Asset
        from airflow_conduit.assets import dlq_asset
        a = dlq_asset("orders")
        assert (a.uri, a.name, a.group) == ("conduit://orders/dlq",) * 2 + ("dead_letter_queue",), a
        assert Asset("conduit://orders/dlq").uri == "conduit://orders/dlq"
        try:
            Asset("conduit://orders/elsewhere")
        except ValueError as e:
            print("rejected:", e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=airflow_env.env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rejected: unknown conduit asset" in out.stdout


def test_example_dags_parse_without_pyspark(airflow_env):
    """Every DAG file in dags/ loads in a DagBag, and nothing imported pyspark on the way."""
    code = textwrap.dedent(
        f"""
        import sys
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder={str(REPO / "dags")!r})
        assert not bag.import_errors, bag.import_errors
        print(sorted(bag.dag_ids))
        loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
        assert not loaded, loaded
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=airflow_env.env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "conduit_orders_hourly" in out.stdout
    assert "conduit_clicks_continuous" in out.stdout
    assert "conduit_orders_dlq_review" in out.stdout


@pytest.mark.parametrize("dag_file", sorted(p.name for p in (REPO / "dags").glob("*.py")))
def test_each_dag_file_imports_without_pyspark(dag_file):
    code = textwrap.dedent(
        f"""
        import runpy, sys
        runpy.run_path({str(REPO / "dags" / dag_file)!r})
        loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
        assert not loaded, loaded
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
