"""The UI test's world: real pipeline runs, and the Airflow environment that serves their state.

Built once per session (conftest.py), in a temporary directory:

- ``orders`` runs with the CLI (``airflow-conduit run --until-idle``): a generator read in batches of
  1,000, a ``custom.python`` processor that nacks a deterministic share of the records with one of two
  errors, and a DLQ that takes every nack: a DLQ of about two thousand records over eight batches.
- ``payments`` runs inside Airflow: ``dag.test()`` of a DAG with ``ConduitPipelineOperator``. Its first
  engine run commits a batch, then a processor raises ``TransientError`` once (a marker file), so the
  operator's recovery restarts it and the second run finishes: one run that recovered. Another processor
  nacks a few records while a flag file exists; the replay test removes the flag first ("the cause was
  fixed") so the replayed records pass.
- Airflow's API server on loopback with ``[conduit] state_dirs`` pointing at that state, the simple auth
  manager with one named user, and Debian's chromium logged in as that user through Airflow's login page.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_BIN = Path(sys.executable).parent
ARTIFACTS = HERE / "artifacts"

USER = "ui-tester"
PASSWORD = "conduit-ui-password"
DAG_ID = "conduit_ui_payments"
TASK_ID = "payments"

ORDERS_RECORDS = 8000
ORDERS_BATCH = 1000
PAYMENTS_RECORDS = 20
PAYMENTS_BATCH = 10
FAIL_FROM = 10
"""The first record of ``payments`` whose first sight raises ``TransientError``: its second batch, so
each of its two runs commits a batch (the "run" and "day" ranges of its charts differ)."""

RULES = '''\
"""custom.python processors of the UI test's pipelines (written by tests/ui/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

from airflow_conduit.errors import TransientError

REJECT_FLAG = Path({flag!r})
TRANSIENT_MARKER = Path({marker!r})


def _n(record):
    # The generator's key of record i is "i"; a replayed record keeps its key (not its position).
    key = record["key"]
    return int(key.decode() if isinstance(key, bytes) else key)


def check_order(record):
    """Nack every 5th order as unbalanced and, of the others, every 13th as missing its currency."""
    n = _n(record)
    if n % 5 == 0:
        raise ValueError("order total does not match its lines")
    if n % 13 == 0:
        raise ValueError("order currency missing")
    return record


def flaky_dependency(record):
    """The first record from {fail_from} on ever seen raises TransientError; every later call passes."""
    if _n(record) < {fail_from}:
        return record
    try:
        fd = os.open(TRANSIENT_MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return record
    os.close(fd)
    raise TransientError("payment gateway unavailable (injected once by the UI test)")


def check_payment(record):
    """Nack every 8th payment while the flag file exists (until the cause is fixed)."""
    if _n(record) % 8 == 0 and REJECT_FLAG.exists():
        raise ValueError("payment without a card token")
    return record
'''

ORDERS_YAML = """\
version: "2.2"
pipelines:
  - id: orders
    description: Orders checked by a Python rule; the bad ones go to the DLQ
    connectors:
      - id: in
        type: source
        plugin: builtin:generator
        settings:
          recordCount: {records}
          collections: orders
          seed: 23
          format.type: structured
          format.options.amount: int
          format.options.customer: string
          maxRecordsPerBatch: {batch}
      - id: out
        type: destination
        plugin: builtin:file
        settings: {{path: {out}}}
    processors:
      - id: check
        plugin: custom.python
        settings: {{function: "ui_rules:check_order", path: {rules_dir}}}
    dead-letter-queue:
      plugin: builtin:file
      settings: {{path: {dlq}}}
      window-size: 0
"""

PAYMENTS_YAML = """\
version: "2.2"
pipelines:
  - id: payments
    description: Payments through a flaky gateway
    connectors:
      - id: in
        type: source
        plugin: builtin:generator
        settings:
          recordCount: {records}
          collections: payments
          seed: 5
          format.type: structured
          format.options.amount: int
          maxRecordsPerBatch: {batch}
      - id: out
        type: destination
        plugin: builtin:file
        settings: {{path: {out}}}
    processors:
      - id: gateway
        plugin: custom.python
        settings: {{function: "ui_rules:flaky_dependency", path: {rules_dir}}}
      - id: validate
        plugin: custom.python
        settings: {{function: "ui_rules:check_payment", path: {rules_dir}}}
    dead-letter-queue:
      plugin: builtin:file
      settings: {{path: {dlq}}}
      window-size: 0
"""

DAG = """\
import pendulum
from airflow.sdk import DAG
from airflow_conduit.operators.pipeline import ConduitPipelineOperator
from airflow_conduit.recovery import RecoveryPolicy

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    ConduitPipelineOperator(
        task_id={task_id!r},
        pipeline_file={file!r},
        pipeline_id="payments",
        state_dir={state_dir!r},
        recovery=RecoveryPolicy(min_delay=1, max_retries=3),
        deferrable=True,
    )
"""


@dataclass(frozen=True)
class World:
    """What the session's fixtures built."""

    root: Path
    base: str
    """The API server's URL."""
    state_dir: Path
    orders_file: Path
    payments_file: Path
    orders_out: Path
    payments_out: Path
    reject_flag: Path
    dag_run: dict[str, Any]
    """``tests/airflow/run_dag.py``'s result of the payments DAG: ``run_id``, ``tasks``, ``xcom``."""
    env: dict[str, str]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, size: int = 6000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except FileNotFoundError:
        return ""


def write_inputs(root: Path) -> dict[str, Path]:
    """The pipeline files, their processors' module and the DAG; returns their paths."""
    state_dir = root / "state"
    rules_dir = root / "rules"
    rules_dir.mkdir()
    reject_flag = root / "reject-payments"
    reject_flag.write_text("the card token service is down\n")
    (rules_dir / "ui_rules.py").write_text(
        RULES.format(flag=str(reject_flag), marker=str(root / "transient-once"), fail_from=FAIL_FROM)
    )
    files = {"state_dir": state_dir, "reject_flag": reject_flag}
    for pipeline, template, records, batch in (
        ("orders", ORDERS_YAML, ORDERS_RECORDS, ORDERS_BATCH),
        ("payments", PAYMENTS_YAML, PAYMENTS_RECORDS, PAYMENTS_BATCH),
    ):
        path = root / f"{pipeline}.yaml"
        path.write_text(
            template.format(
                records=records,
                batch=batch,
                out=root / "out" / pipeline,
                dlq=root / "dlq-plugin" / pipeline,
                rules_dir=rules_dir,
            )
        )
        files[f"{pipeline}_file"] = path
        files[f"{pipeline}_out"] = root / "out" / pipeline
    dags = root / "dags"
    dags.mkdir()
    files["dags"] = dags
    files["dag_file"] = dags / f"{DAG_ID}.py"
    files["dag_file"].write_text(
        DAG.format(dag_id=DAG_ID, task_id=TASK_ID, file=str(files["payments_file"]), state_dir=str(state_dir))
    )
    files["passwords"] = root / "passwords.json"
    files["passwords"].write_text(json.dumps({USER: PASSWORD}))
    return files


def airflow_env(root: Path, files: dict[str, Path]) -> dict[str, str]:
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(root / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(files["dags"]),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(files["passwords"]),
        "AIRFLOW__CONDUIT__STATE_DIRS": str(files["state_dir"]),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    # Who acts in the UI must come from Airflow's login, never from the environment's fallback.
    env.pop("CONDUIT_USER", None)
    return env


def wait_healthy(server: subprocess.Popen[bytes], base: str, log_path: Path) -> None:
    deadline = time.monotonic() + 300
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"api-server did not start:\n{log_tail(log_path)}")
        time.sleep(1)


def stop(server: subprocess.Popen[bytes]) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
