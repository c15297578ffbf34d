"""Start and stop a throwaway Spark standalone cluster (one master, one worker) from the pip package.

Everything binds to loopback on free ports; the processes run in their own process group so the
fixture can stop the JVMs spark-class starts, also when a test fails.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
# A cold JVM pair on a busy 2-core machine can take a while; this bounds the wait, it asserts no speed.
STARTUP_TIMEOUT = 180.0


@dataclass(frozen=True)
class SparkCluster:
    """A running standalone cluster.

    :param master_url: ``spark://host:port`` for ``--master``
    :param web_url: the master's web UI; ``/json/`` describes workers and applications
    :param work_dir: the worker's work dir (one ``app-*`` directory per application it ran)
    :param env: the environment the cluster runs with, for clients started against it
    """

    master_url: str
    web_url: str
    work_dir: Path
    env: dict[str, str]

    def state(self) -> dict[str, Any]:
        """The master's view of the cluster (workers, active and completed applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=10) as response:
            return json.load(response)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def cluster_env() -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_LOCAL_IP"] = HOST
    env["SPARK_LOCAL_HOSTNAME"] = "localhost"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # The JVMs the launcher picks up a SPARK_HOME of the pip package; a stray one would mix versions.
    env.pop("SPARK_HOME", None)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    if "JAVA_HOME" not in env and not _on_path("java"):
        pytest.fail("Java 17 is needed for the Spark cluster: neither JAVA_HOME nor java on PATH")
    return env


def _on_path(program: str) -> bool:
    return any((Path(d) / program).exists() for d in os.environ.get("PATH", "").split(os.pathsep) if d)


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(BIN / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=log.parent,
            start_new_session=True,  # its own process group: the teardown signals exactly these
        )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    except ProcessLookupError:
        pass


def _tail(log: Path, lines: int = 40) -> str:
    if not log.exists():
        return f"({log} missing)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _wait_for_worker(cluster: SparkCluster, processes: dict[str, tuple[subprocess.Popen, Path]]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for name, (process, log) in processes.items():
            if process.poll() is not None:
                pytest.fail(f"Spark {name} exited with {process.returncode} while starting:\n{_tail(log)}")
        try:
            if cluster.state().get("aliveworkers", 0) >= 1:
                return
        except OSError as error:  # the web UI is not up yet
            last_error = error
        except ValueError as error:  # up, but /json/ not attached yet: the master's HTML page answers
            last_error = error
        time.sleep(0.5)
    logs = "\n\n".join(f"--- {name}\n{_tail(log)}" for name, (_, log) in processes.items())
    pytest.fail(f"no Spark worker registered within {STARTUP_TIMEOUT:.0f}s ({last_error}):\n{logs}")


@contextmanager
def standalone_cluster(root: Path) -> Iterator[SparkCluster]:
    """A master and one worker (2 cores, 2 GB) under ``root``; both stopped on exit, also on failure."""
    work_dir = root / "work"
    work_dir.mkdir()
    env = cluster_env()
    master_port, master_ui, worker_ui = free_port(), free_port(), free_port()
    cluster = SparkCluster(
        master_url=f"spark://{HOST}:{master_port}",
        web_url=f"http://{HOST}:{master_ui}",
        work_dir=work_dir,
        env=env,
    )
    processes: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        master_log = root / "master.log"
        processes["master"] = (
            _start(
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host", HOST,
                    "--port", str(master_port),
                    "--webui-port", str(master_ui),
                ],
                master_log,
                env,
            ),
            master_log,
        )  # fmt: skip
        worker_log = root / "worker.log"
        processes["worker"] = (
            _start(
                [
                    "org.apache.spark.deploy.worker.Worker", cluster.master_url,
                    "--host", HOST,
                    "--cores", "2",
                    "--memory", "2g",
                    "--webui-port", str(worker_ui),
                    "--work-dir", str(work_dir),
                ],
                worker_log,
                env,
            ),
            worker_log,
        )  # fmt: skip
        _wait_for_worker(cluster, processes)
        yield cluster
    finally:
        # The worker first (its executors are in its process group), then the master.
        for name in ("worker", "master"):
            if name in processes:
                _stop(processes[name][0])
