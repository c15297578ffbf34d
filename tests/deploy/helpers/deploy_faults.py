"""``custom.python`` processors of the deployment tests: outages and errors injected on the Spark worker.

They run in the Python workers of the standalone cluster's executors, which do not inherit the
environment of ``spark-submit`` (the operator's ``env_vars``): the DAGs pass their settings as
``spark.executorEnv.*`` properties (``conf=``), which the executors do get. Everything is on loopback, so
a path is the same file for the test, the driver and the executors.

- ``DEPLOY_AUDIT_LOG`` and ``DEPLOY_FAIL_RUNS``: ``fail_first_runs`` raises ``TransientError`` in the
  first N engine runs of the pipeline (counted by the ``started`` events of its audit log).
- ``always_transient`` and ``always_fatal`` raise on every record.
- ``DEPLOY_SLOW_SECONDS``: ``slow`` sleeps this long per record.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airflow_conduit.errors import FatalError, TransientError


def passthrough(record: dict[str, Any]) -> dict[str, Any]:
    """Records unchanged, but for what the executor saw of the operator's ``env_vars``
    (``DEPLOY_PIPELINE`` is set only there): metadata ``deploy.executor.env_vars``."""
    record["metadata"]["deploy.executor.env_vars"] = os.environ.get("DEPLOY_PIPELINE", "<unset>")
    return record


def fail_first_runs(record: dict[str, Any]) -> dict[str, Any]:
    """Transient in the first ``DEPLOY_FAIL_RUNS`` engine runs of the pipeline."""
    audit = Path(os.environ["DEPLOY_AUDIT_LOG"])
    runs = sum('"event": "started"' in line for line in audit.read_text().splitlines())
    if runs <= int(os.environ["DEPLOY_FAIL_RUNS"]):
        raise TransientError(f"dependency unavailable in engine run {runs}")
    return record


def always_transient(record: dict[str, Any]) -> dict[str, Any]:
    """An outage that never ends."""
    raise TransientError("dependency unavailable (it never comes back)")


def always_fatal(record: dict[str, Any]) -> dict[str, Any]:
    raise FatalError("the dependency rejected the credentials", code="deploy_fatal")


def slow(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(os.environ.get("DEPLOY_SLOW_SECONDS", "0.01")))
    return record
