"""The topology of ``docker-compose.yaml`` on loopback, without Docker, for the deployment tests.

PostgreSQL (a throwaway cluster, ``tests/pgcluster.py``) is Airflow's metadata DB; ``airflow api-server``,
``airflow scheduler`` (LocalExecutor), ``airflow dag-processor`` and ``airflow triggerer`` each run as
their own process with their own log file; a Spark standalone master and worker
(``tests/cluster/spark_standalone.py``) run the pipelines: the Spark connection's host is the master, so
each pipeline run is a ``spark-submit`` in client mode from a LocalExecutor task against the cluster.

Every process runs in its own process group, so teardown signals exactly what it started (and what those
started), also when a test failed. Everything is driven through Airflow's REST API v2 (:class:`Api`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_BIN = Path(sys.executable).parent
AIRFLOW = str(VENV_BIN / "airflow")
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
STARTUP_TIMEOUT = 300.0
MASTER_OPTS = "-Dspark.deploy.defaultCores=1"
TERMINAL_RUN_STATES = ("success", "failed")
TERMINAL_TI_STATES = ("success", "failed", "skipped", "upstream_failed", "removed")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"({path} missing)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def utc(text: str | None) -> datetime | None:
    return None if not text else datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


class ApiError(AssertionError):
    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url} -> {status}: {body[:2000]}")
        self.status = status


class Api:
    """Airflow's REST API v2 (the simple auth manager with all users admins: no token needed)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def request(self, method: str, path: str, body: Any = None, *, params: dict | None = None) -> Any:
        url = f"{self.base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            raise ApiError(method, url, error.code, error.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    # DAGs and runs -------------------------------------------------------------------------------
    def dag(self, dag_id: str) -> dict[str, Any]:
        return self.get(f"/api/v2/dags/{dag_id}")

    def import_errors(self) -> list[dict[str, Any]]:
        return self.get("/api/v2/importErrors")["import_errors"]

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        run = self.request(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}}
        )
        return run["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns", order_by="run_after")["dag_runs"]

    def _ti_path(self, dag_id: str, run_id: str) -> str:
        return f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances"

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        tis = self.get(self._ti_path(dag_id, run_id))["task_instances"]
        return {ti["task_id"]: ti for ti in tis}

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.get(f"{self._ti_path(dag_id, run_id)}/{task_id}")

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of the task instance (earlier tries from the history, and the current one)."""
        return self.get(f"{self._ti_path(dag_id, run_id)}/{task_id}/tries")["task_instances"]

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The task log of one try as text: one line per structured log event."""
        data = self.get(f"{self._ti_path(dag_id, run_id)}/{task_id}/logs/{try_number}", full_content="true")
        lines = []
        for item in data.get("content") or []:
            if isinstance(item, str):
                lines.append(item)
                continue
            extra = {
                k: v
                for k, v in item.items()
                if k not in ("event", "timestamp", "level", "logger", "sources", "filename", "lineno")
            }
            text = f"{item.get('timestamp', '')} {item.get('level', '')} {item.get('event', '')}"
            if extra:
                text += f" {extra}"
            lines.append(text)
        return "\n".join(lines)

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        entry = self.get(f"{self._ti_path(dag_id, run_id)}/{task_id}/xcomEntries/{key}", deserialize="true")
        return entry["value"]

    # assets --------------------------------------------------------------------------------------
    def asset(self, uri: str) -> dict[str, Any] | None:
        assets = self.get("/api/v2/assets", uri_pattern=uri)["assets"]
        matching = [a for a in assets if a["uri"] == uri]
        return matching[0] if matching else None

    def asset_events(self, asset_id: int) -> list[dict[str, Any]]:
        return self.get("/api/v2/assets/events", asset_id=asset_id, order_by="timestamp")["asset_events"]

    # waiting -------------------------------------------------------------------------------------
    def wait_for_run(
        self,
        dag_id: str,
        run_id: str,
        *,
        timeout: float,
        poll: float = 0.5,
        on_poll: Callable[[dict[str, dict[str, Any]]], None] | None = None,
    ) -> RunWatch:
        """Poll the run and its task instances until the run ends; records every TI state seen."""
        watch = RunWatch(dag_id, run_id)
        deadline = time.monotonic() + timeout
        while True:
            tis = self.task_instances(dag_id, run_id)
            watch.observe(tis)
            if on_poll is not None:
                on_poll(tis)
            run = self.run(dag_id, run_id)
            if run["state"] in TERMINAL_RUN_STATES:
                watch.run = run
                watch.tis = self.task_instances(dag_id, run_id)
                return watch
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"DAG run {dag_id}/{run_id} still {run['state']} after {timeout:.0f}s; "
                    f"task states seen: {watch.seen}"
                )
            time.sleep(poll)


@dataclass
class RunWatch:
    """What polling one DAG run saw: each task's distinct states in order, with the time first seen."""

    dag_id: str
    run_id: str
    seen: dict[str, list[str]] = field(default_factory=dict)
    first_seen: dict[tuple[str, str], float] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    tis: dict[str, dict[str, Any]] = field(default_factory=dict)

    def observe(self, tis: dict[str, dict[str, Any]]) -> None:
        now = time.time()
        for task_id, ti in tis.items():
            states = self.seen.setdefault(task_id, [])
            state = str(ti.get("state"))
            if not states or states[-1] != state:
                states.append(state)
            self.first_seen.setdefault((task_id, state), now)


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    log: Path


@dataclass
class Deployment:
    """The running topology: where everything is and how to reach it."""

    root: Path
    api: Api
    env: dict[str, str]
    state_dir: Path
    output_dir: Path
    work_dir: Path
    dags_dir: Path
    logs: dict[str, Path]
    spark_master_url: str
    spark_web_url: str
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return self.api.base

    def service_log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def tails(self, lines: int = 40) -> str:
        return "\n\n".join(f"----- {name} ({path})\n{tail(path, lines)}" for name, path in self.logs.items())

    def check_alive(self) -> None:
        dead = {n: s.process.returncode for n, s in self.services.items() if s.process.poll() is not None}
        if dead:
            raise AssertionError(f"services exited: {dead}\n{self.tails()}")


def _start(name: str, args: list[str], env: dict[str, str], log: Path, cwd: Path) -> Service:
    with log.open("wb") as out:
        process = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group: teardown signals it and its children
        )
    return Service(name, process, log)


def _stop(service: Service) -> None:
    process = service.process
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    with suppress(ProcessLookupError):  # the group's stragglers (LocalExecutor workers, log servers)
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def _kill_leftovers(root: Path) -> list[int]:
    """Processes of this deployment that left its process groups (an engine runs in its own session):
    found by the deployment's root in their environment (``DEPLOY_ROOT``), killed by pid."""
    import psutil

    me = os.getpid()
    marker = str(root)
    killed = []
    for process in psutil.process_iter(["pid", "environ"]):
        if process.info["pid"] == me:
            continue
        environ = process.info.get("environ") or {}
        if environ.get("DEPLOY_ROOT") == marker:
            try:
                process.kill()
                killed.append(process.info["pid"])
            except psutil.Error:
                pass
    return killed


def _wait(what: str, check: Callable[[], bool], deployment: Deployment, timeout: float = STARTUP_TIMEOUT):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        deployment.check_alive()
        try:
            if check():
                return
        except (OSError, ApiError, ValueError, KeyError) as error:
            last = error
        time.sleep(1)
    raise AssertionError(f"{what} not ready within {timeout:.0f}s ({last})\n{deployment.tails()}")


def _health(api: Api) -> dict[str, str]:
    health = api.get("/api/v2/monitor/health")
    return {component: (value or {}).get("status") for component, value in health.items()}


@contextmanager
def deployment(
    root: Path, dag_ids: list[str], *, extra_env: dict[str, str] | None = None
) -> Iterator[Deployment]:
    """Start the whole topology under ``root``; everything is stopped on exit, also on failure.

    :param dag_ids: DAGs (already in the DAGs folder) to wait for before yielding
    """
    from pgcluster import start_cluster
    from spark_standalone import standalone_cluster

    started = time.monotonic()
    logs_dir = root / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    state_dir, output_dir, work_dir = root / "state", root / "output", root / "work"
    for directory in (state_dir, output_dir, work_dir):
        directory.mkdir(exist_ok=True)
    with ExitStack() as stack:
        pg = start_cluster()
        stack.callback(pg.destroy)
        db_url = pg.create_database("airflow").replace("postgresql://", "postgresql+psycopg://", 1)
        # Each application gets one of the worker's two cores unless it asks for more, so that two
        # pipelines run side by side instead of one waiting for the other's executors (as in
        # docker-compose.yaml; the master reads SPARK_MASTER_OPTS from the environment it starts with).
        master_opts = os.environ.get("SPARK_MASTER_OPTS")
        os.environ["SPARK_MASTER_OPTS"] = f"{master_opts or ''} {MASTER_OPTS}".strip()
        try:
            spark = stack.enter_context(standalone_cluster(_mkdir(root / "spark")))
        finally:
            if master_opts is None:
                os.environ.pop("SPARK_MASTER_OPTS")
            else:
                os.environ["SPARK_MASTER_OPTS"] = master_opts
        stack.callback(_kill_leftovers, root)

        api_port = free_port()
        jwt_secret = secrets.token_urlsafe(32)
        env = {
            **spark.env,  # SPARK_LOCAL_IP=127.0.0.1, PYSPARK_PYTHON: the driver binds to loopback
            "DEPLOY_ROOT": str(root),
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # LocalExecutor starts this many worker processes up front (default 32).
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            # psycopg 3 for the async engine too (Airflow would derive asyncpg, which is not installed).
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": db_url,
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret,
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__FERNET_KEY": "",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": "127.0.0.1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            # The DAGs are in place before the DAG processor starts; no need to re-list or re-parse often.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "600",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark.master_url}),
            # The DLQ watcher asks the API server which events a stopped triggerer stored (case 6).
            "AIRFLOW_CONN_CONDUIT_AIRFLOW_API": json.dumps(
                {"conn_type": "http", "host": f"http://127.0.0.1:{api_port}"}
            ),
            "CONDUIT_STATE_DIR": str(state_dir),
            "CONDUIT_OUTPUT_DIR": str(output_dir),
            "DEPLOY_WORK_DIR": str(work_dir),
            "DEPLOY_HELPERS_DIR": str(HERE / "helpers"),
            # The [conduit] section as docker-compose.yaml sets it (Conduit's defaults).
            "AIRFLOW__CONDUIT__MIN_DELAY": "1s",
            "AIRFLOW__CONDUIT__MAX_DELAY": "10m",
            "AIRFLOW__CONDUIT__BACKOFF_FACTOR": "2",
            "AIRFLOW__CONDUIT__MAX_RETRIES": "-1",
            "AIRFLOW__CONDUIT__MAX_RETRIES_WINDOW": "5m",
            "AIRFLOW__CONDUIT__DEFERRAL_THRESHOLD": "30s",
            "AIRFLOW__CONDUIT__STATE_DIRS": str(state_dir),
            **(extra_env or {}),
        }
        for name in (
            "SPARK_HOME",
            "PYSPARK_GATEWAY_PORT",
            "AIRFLOW_CONFIG",
            "PYTEST_CURRENT_TEST",
            "SPARK_MASTER_OPTS",
        ):
            env.pop(name, None)
        migrate = subprocess.run(
            [AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=900, cwd=root
        )
        if migrate.returncode != 0:
            raise AssertionError(
                f"airflow db migrate failed:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-6000:]}"
            )

        logs = {name: logs_dir / f"{name}.log" for name in SERVICES}
        logs["spark-master"] = root / "spark" / "master.log"
        logs["spark-worker"] = root / "spark" / "worker.log"
        deployment = Deployment(
            root=root,
            api=Api(f"http://127.0.0.1:{api_port}"),
            env=env,
            state_dir=state_dir,
            output_dir=output_dir,
            work_dir=work_dir,
            dags_dir=root / "dags",
            logs=logs,
            spark_master_url=spark.master_url,
            spark_web_url=spark.web_url,
        )
        commands = {
            "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(api_port), "--workers", "1"],
            "scheduler": ["scheduler"],
            "dag-processor": ["dag-processor"],
            "triggerer": ["triggerer"],
        }
        try:
            for name, args in commands.items():
                service = _start(name, [AIRFLOW, *args], env, logs[name], root)
                deployment.services[name] = service
                stack.callback(_stop, service)
            api = deployment.api
            _wait("the API server", lambda: _health(api)["metadatabase"] == "healthy", deployment)
            _wait(
                "scheduler, triggerer and DAG processor",
                lambda: set(_health(api).values()) == {"healthy"},
                deployment,
            )

            def parsed() -> bool:
                errors = api.import_errors()
                if errors:
                    raise AssertionError(f"DAG import errors: {errors}")
                return all(_exists(api, dag_id) for dag_id in dag_ids)

            _wait("the DAGs", parsed, deployment)
            print(
                f"\ndeployment up in {time.monotonic() - started:.0f}s: api-server {api.base}, "
                f"Spark master {spark.master_url}, metadata DB PostgreSQL on port {pg.port}, root {root}"
            )
        except BaseException:
            print(f"\ndeployment failed to start:\n{deployment.tails(60)}")
            raise
        yield deployment
        # Teardown: the ExitStack stops the services, kills engines that outlived them, stops Spark
        # and destroys PostgreSQL, in that order.


def _exists(api: Api, dag_id: str) -> bool:
    try:
        api.dag(dag_id)
        return True
    except ApiError as error:
        if error.status == 404:
            return False
        raise


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def copy_dags(target: Path) -> list[str]:
    """Copy the DAG templates (``tests/deploy/dags``) to ``target``; returns their DAG ids."""
    shutil.copytree(HERE / "dags", target, ignore=shutil.ignore_patterns("__pycache__"))
    return sorted(p.stem for p in target.glob("deploy_*.py") if p.stem != "deploy_common")


def read_jsonl(directory: Path) -> list[dict[str, Any]]:
    """The OpenCDC records of a file destination, in delivery order (file name order)."""
    return [
        json.loads(line)
        for path in sorted(Path(directory).glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


@dataclass
class DlqReview:
    """Case 6, run once per session (the UI test shows its DLQ): the producer's run, its DLQ asset
    event, and the review run that event created."""

    producer_run: str
    producer_xcom: dict[str, Any]
    event: dict[str, Any]
    review_run: str
    review_watch: RunWatch
    review_xcom: dict[str, Any]


def run_dlq_review(deploy: Deployment) -> DlqReview:
    api = deploy.api
    producer_run = api.trigger("deploy_orders")
    producer = api.wait_for_run("deploy_orders", producer_run, timeout=900)
    assert producer.run["state"] == "success", (
        producer.seen,
        api.log("deploy_orders", producer_run, "orders", 1)[-3000:],
    )
    producer_xcom = api.xcom("deploy_orders", producer_run, "orders")
    asset = api.asset("conduit://deploy-orders/dlq")
    assert asset is not None, "the DLQ asset is not registered"
    deadline = time.monotonic() + 120
    while True:  # the scheduler creates the review run from the event in its next loop
        events = [e for e in api.asset_events(asset["id"]) if e["source_run_id"] == producer_run]
        if events and events[0]["created_dagruns"]:
            break
        assert time.monotonic() < deadline, f"no review run created by the DLQ asset event: {events}"
        time.sleep(1)
    (event,) = events
    review_run = event["created_dagruns"][0]["run_id"]
    review_watch = api.wait_for_run("deploy_orders_dlq_review", review_run, timeout=900)
    review_xcom = (
        api.xcom("deploy_orders_dlq_review", review_run, "review")
        if review_watch.tis["review"]["state"] == "success"
        else {}
    )
    return DlqReview(producer_run, producer_xcom, event, review_run, review_watch, review_xcom)


OUTAGE_DAG = "deploy_outage_deferred"
OUTAGE_PIPELINE = "deploy-outage"
OUTAGE_TEST = "test_transient_outage_recovered_through_the_triggerer"
KILLED_DAG = "deploy_killed"
KILLED_PIPELINE = "deploy-killed"
KILLED_TEST = "test_killed_task_process_retry_reattaches"


class BackgroundRun:
    """A DAG run triggered when the session starts and followed in a background thread, so that its
    waits (backoffs, Airflow's reaction to a killed task, a slow engine) overlap the other cases; its
    test, later in the session, checks how it went (:meth:`result`)."""

    dag_id = ""

    def __init__(self, deploy: Deployment) -> None:
        self.deploy = deploy
        self.run_id: str | None = None
        self.watch: RunWatch | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._follow, name=f"background-{self.dag_id}", daemon=True)

    def start(self) -> Self:
        self.prepare()
        self.run_id = self.deploy.api.trigger(self.dag_id)
        self._thread.start()
        return self

    def prepare(self) -> None:
        """Before the run is triggered."""

    def on_poll(self, tis: dict[str, dict[str, Any]]) -> None:
        """Each time the run's task instances were polled."""

    def finish(self) -> None:
        """After the run ended (also when following it failed)."""

    def _follow(self) -> None:
        try:
            assert self.run_id is not None
            self.watch = self.deploy.api.wait_for_run(
                self.dag_id, self.run_id, timeout=1500, poll=1.0, on_poll=self.on_poll
            )
        except BaseException as error:  # reported by the test
            self.error = error
        finally:
            self.finish()

    def result(self, timeout: float) -> RunWatch:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"DAG run {self.dag_id}/{self.run_id} did not end within the wait")
        if self.error is not None:
            raise self.error
        assert self.watch is not None
        return self.watch


class OutageRun(BackgroundRun):
    """Case 1: 7 engine runs and 63 s of backoff.

    The outage: while it lasts, the test holds the pipeline's run lock (``STATE/deploy-outage/run.lock``),
    so every engine run is refused at once (exit 75, ``pipeline_locked``, a transient error) after the
    few seconds spark-submit takes to start. A dependency failing inside the pipeline would not do here:
    such a run costs a Spark start and a first batch (60-75 s on this machine under load), so five
    restarts do not fit Conduit's default 5 m window, older restarts expire, the attempt count stays at
    5 (16 s) and the backoff never reaches the deferral threshold (seen: attempts 1, 2, 3, 4, 5, 5, 5).
    The lock is let go once the task was seen ``deferred``.
    """

    dag_id = OUTAGE_DAG

    def __init__(self, deploy: Deployment) -> None:
        from airflow_conduit.run_lock import RunLock

        super().__init__(deploy)
        self.lock = RunLock(deploy.state_dir / OUTAGE_PIPELINE, OUTAGE_PIPELINE)
        self.holder: dict[str, Any] = {}
        self.cleared_at: float | None = None

    def prepare(self) -> None:
        from dataclasses import asdict

        from airflow_conduit.run_lock import LockHolder
        from airflow_conduit.state import utc_now

        holder = LockHolder(
            socket.gethostname(), os.getpid(), utc_now(), owner="the deployment test (outage)"
        )
        self.lock.acquire(holder)
        self.holder = asdict(holder)

    def on_poll(self, tis: dict[str, dict[str, Any]]) -> None:
        if tis["run"]["state"] == "deferred" and self.cleared_at is None:
            self.lock.release()
            self.cleared_at = time.time()

    def finish(self) -> None:
        self.lock.release()


class KilledRun(BackgroundRun):
    """Case 8: once the engine runs (status ``running`` after a first batch), SIGKILL the task process,
    the TI's ``pid`` (the process the LocalExecutor's supervisor forked), and nothing else."""

    dag_id = KILLED_DAG

    def __init__(self, deploy: Deployment) -> None:
        from airflow_conduit.state import PipelineState

        super().__init__(deploy)
        self.state = PipelineState.of(deploy.state_dir, KILLED_PIPELINE)
        self.killed: dict[str, Any] = {}

    def on_poll(self, tis: dict[str, dict[str, Any]]) -> None:
        ti = tis["run"]
        if self.killed or ti["state"] != "running" or ti["try_number"] != 1:
            return
        status = self.state.read_status() or {}
        if status.get("status") != "running" or not status.get("batches"):
            return
        assert self.run_id is not None
        started = utc(self.deploy.api.run(self.dag_id, self.run_id)["start_date"])
        updated = utc(status.get("updated_at"))
        if started is None or updated is None or updated < started:
            return
        pid = self.deploy.api.task_instance(self.dag_id, self.run_id, "run")["pid"]
        self.killed = {"pid": pid, "tree": process_tree(pid), "batches": status["batches"]}
        os.kill(pid, signal.SIGKILL)
        self.killed["at"] = time.time()


def process_tree(pid: int) -> str:
    """The process, its parent and its children, for the report."""
    import psutil

    def name(process: psutil.Process) -> str:
        try:
            return f"{process.pid} {' '.join(process.cmdline())[:90]}"
        except psutil.Error:
            return str(process.pid)

    try:
        process = psutil.Process(pid)
        parent, children = process.parent(), process.children(recursive=True)
        session = os.getsid(pid)
    except (psutil.Error, OSError) as error:
        return f"({error})"
    return (
        f"parent {name(parent) if parent else '-'}; task process {name(process)} (session {session}); "
        f"children {[name(c) for c in children]}"
    )


# Restarting a service (issue 22's live DLQ watcher: a triggerer restart mid-run) ---------------------
SERVICE_ARGS = {"scheduler": ["scheduler"], "dag-processor": ["dag-processor"], "triggerer": ["triggerer"]}


def restart_service(deploy: Deployment, name: str, *, kill: bool = False) -> None:
    """Stop service ``name`` as teardown does (SIGTERM to its group, then SIGKILL), or with ``kill`` at
    once with SIGKILL (a crash: nothing gets to finish), start it again with the same command and
    environment, its output appended to the same log, and wait until the API server reports it healthy
    again. The :class:`Service` object is updated in place, so teardown stops the new process."""
    service = deploy.services[name]
    if kill:
        with suppress(ProcessLookupError):
            os.killpg(service.process.pid, signal.SIGKILL)
        service.process.wait(timeout=30)
    _stop(service)  # also reaps what a SIGKILL left of the group
    stopped_at = datetime.now(UTC)
    with service.log.open("ab") as out:
        how = "SIGKILL" if kill else "SIGTERM"
        out.write(f"\n===== restarted by the test ({how}) at {datetime.now(UTC).isoformat()}\n".encode())
        service.process = subprocess.Popen(
            [AIRFLOW, *SERVICE_ARGS[name]],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=deploy.env,
            cwd=deploy.root,
            start_new_session=True,
        )
    component = name.replace("-", "_")
    _wait(
        f"the restarted {name}",
        lambda: _beat_since(deploy, component, stopped_at),
        deploy,
    )


def _beat_since(deploy: Deployment, component: str, moment: datetime) -> bool:
    """Whether ``component`` is healthy with a heartbeat after ``moment`` (not the stopped process's)."""
    health = deploy.api.get("/api/v2/monitor/health").get(component) or {}
    beat = utc(health.get(f"latest_{component}_heartbeat"))
    return health.get("status") == "healthy" and beat is not None and beat > moment
