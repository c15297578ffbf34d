"""Real Airflow 3.3 (``dag.test()`` on SQLite) around the Airflow side of airflow-conduit.

Each DAG runs in a subprocess (``run_dag.py``) with its own environment, against one metadata DB that
is migrated once per session. ``spark_default`` points at ``local[2]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_BIN = Path(sys.executable).parent

# Before anything imports Airflow in this process (the in-process trigger tests do): never ~/airflow.
_HOME = Path(tempfile.mkdtemp(prefix="conduit-airflow-home-"))
os.environ.setdefault("AIRFLOW_HOME", str(_HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

SPARK_CONN = json.dumps({"conn_type": "spark", "host": "local[2]"})


class AirflowEnv:
    """A migrated Airflow home with a DAGs folder; runs DAGs with ``dag.test()`` in subprocesses."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.dags = home / "dags"
        self.dags.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARK_DEFAULT": SPARK_CONN,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p),
        }

    def migrate(self) -> None:
        subprocess.run(
            [str(VENV_BIN / "airflow"), "db", "migrate"],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=600,
        )

    def write_dag(self, name: str, source: str) -> Path:
        path = self.dags / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    def run_dag(
        self,
        dag_file: Path,
        dag_id: str,
        *,
        env: dict[str, str] | None = None,
        timeout: float = 600,
        remove: bool = True,
    ) -> dict:
        out = self.home / f"result-{dag_id}-{time.time_ns()}.json"
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, str(HERE / "run_dag.py"), str(dag_file), dag_id, str(out)],
                env={**self.env, **(env or {})},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        finally:
            if remove and dag_file.parent == self.dags:
                dag_file.unlink(missing_ok=True)
        if proc.returncode != 0 or not out.exists():
            output = f"{proc.stdout[-6000:]}\n{proc.stderr[-12000:]}"
            raise AssertionError(f"dag.test() of {dag_id} failed ({proc.returncode}):\n{output}")
        result = json.loads(out.read_text())
        result["log"] = proc.stdout + proc.stderr
        result["wall_seconds"] = round(time.monotonic() - started, 1)
        return result


@pytest.fixture(scope="session")
def airflow_env() -> AirflowEnv:
    env = AirflowEnv(_HOME)
    env.migrate()
    return env
