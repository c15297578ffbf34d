"""A throwaway RabbitMQ node for the tests, chaos runs and benchmarks.

Debian's ``rabbitmq-server`` started as a node of its own: its node name, AMQP port, distribution port,
``epmd`` port, data and log directories and Erlang cookie are all fresh, under one temp dir, and it listens
on 127.0.0.1 only. ``rabbitmqctl`` with the same environment talks to it. A user with a password (not
``guest``) is made, so the tests can show that the password never reaches a message or log.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")
USER = "conduit"
PASSWORD = "rabbit-Pw-7734"  # noqa: S105 - a throwaway test node
START_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class QueueCounts:
    ready: int
    unacked: int


@dataclass
class RabbitNode:
    """One running node; ``url()`` is an AMQP URL for the test user."""

    root: Path
    port: int
    dist_port: int
    epmd_port: int
    name: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HOME=str(self.root),
            RABBITMQ_NODENAME=f"{self.name}@localhost",
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.root / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.root / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.root / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(self.root / "rabbitmq"),
            RABBITMQ_CONF_ENV_FILE=str(self.root / "rabbitmq-env.conf"),
            RABBITMQ_PID_FILE=str(self.root / "node.pid"),
            ERL_EPMD_ADDRESS="127.0.0.1",
            ERL_EPMD_PORT=str(self.epmd_port),
        )
        return env

    def url(self, user: str = USER, password: str = PASSWORD) -> str:
        return f"amqp://{user}:{password}@127.0.0.1:{self.port}/%2F"

    def ctl(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            [str(CTL), "-q", *args], env=self.env(), capture_output=True, text=True, timeout=120
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def start(self) -> None:
        """Start the node and wait until it takes AMQP connections."""
        log = open(self.root / "server.out", "ab")  # noqa: SIM115 - held by the server process
        self.process = subprocess.Popen(
            [str(SERVER)], env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited: see {self.root / 'server.out'}")
            result = subprocess.run(
                [str(CTL), "-q", "await_startup", "--timeout", "5"],
                env=self.env(),
                capture_output=True,
                timeout=60,
            )
            if result.returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"rabbitmq-server did not start in {START_TIMEOUT}s: see {self.root}")

    def stop(self) -> None:
        """Stop the node (its Erlang VM and its process group); the data dir stays for a restart."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.ctl("shutdown", check=False)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self.process = None

    def queue_counts(self, queue: str) -> QueueCounts:
        """``messages_ready`` and ``messages_unacknowledged`` of a queue (zeros when it does not exist)."""
        out = self.ctl(
            "list_queues", "name", "messages_ready", "messages_unacknowledged", "--no-table-headers"
        )
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == queue:
                return QueueCounts(int(parts[1]), int(parts[2]))
        return QueueCounts(0, 0)

    def destroy(self) -> None:
        self.stop()
        # The node's own epmd (its own port): ended by name and port, never another one.
        subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"], capture_output=True, env=self.env())
        shutil.rmtree(self.root, ignore_errors=True)


def start_node() -> RabbitNode:
    if not SERVER.exists():
        raise RuntimeError(f"{SERVER} not found: apt-get install rabbitmq-server")
    root = Path(tempfile.mkdtemp(prefix="conduit-rabbit-"))
    (root / "enabled_plugins").write_text("[].\n")
    (root / "rabbitmq.conf").write_text("loopback_users = none\ndisk_free_limit.absolute = 50MB\n")
    (root / "rabbitmq-env.conf").write_text("")
    cookie = root / ".erlang.cookie"
    cookie.write_text(uuid.uuid4().hex)
    cookie.chmod(0o400)
    node = RabbitNode(
        root=root,
        port=_free_port(),
        dist_port=_free_port(),
        epmd_port=_free_port(),
        name=f"conduit-{uuid.uuid4().hex[:8]}",
    )
    try:
        node.start()
        node.ctl("add_user", USER, PASSWORD)
        node.ctl("set_permissions", "-p", "/", USER, ".*", ".*", ".*")
    except BaseException:
        node.destroy()
        raise
    return node


@pytest.fixture(scope="session", name="rabbit")
def rabbit_node() -> Iterator[RabbitNode]:
    """A RabbitMQ node for the session (it takes seconds to start)."""
    node = start_node()
    try:
        yield node
    finally:
        node.destroy()
