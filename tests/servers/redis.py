"""A throwaway Redis server for the tests, chaos runs and benchmarks: Debian's ``redis-server`` on a
free loopback port, its files in a temporary directory, stopped (and the directory removed) at the end.

With ``durable=True`` it keeps an append-only file synced on every write, so data survives a stop and a
start (the outage tests); otherwise nothing is persisted.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REDIS_SERVER = "/usr/bin/redis-server"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    root: Path
    port: int
    password: str = ""
    durable: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        binary = shutil.which("redis-server") or REDIS_SERVER
        if not Path(binary).exists():
            raise RuntimeError("redis-server not found: apt-get install redis-server")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root)]
        args += ["--save", "", "--daemonize", "no", "--logfile", str(self.root / "redis.log")]
        if self.durable:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.client().ping():
                    return
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.root / "redis.log").read_text() if (self.root / "redis.log").exists() else ""
                    raise RuntimeError(f"redis-server did not start on {self.port}: {log[-2000:]}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: with an append-only file, it is flushed first
            self.process.wait(timeout=30)
        self.process = None

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password or None)

    def settings(self, key: str, **extra: str) -> str:
        """The connector's settings as a YAML flow mapping."""
        items = {"redis.host": "127.0.0.1", "redis.port": str(self.port), "redis.key": key, "mode": "stream"}
        if self.password:
            items["redis.password"] = self.password
        items.update(extra)
        return "{" + ", ".join(f'"{k}": "{v}"' for k, v in items.items()) + "}"


def start_redis(password: str = "", durable: bool = False) -> RedisServer:
    server = RedisServer(Path(tempfile.mkdtemp(prefix="redis-test-")), _free_port(), password, durable)
    server.start()
    return server


def destroy(server: RedisServer) -> None:
    server.stop()
    shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """One server for a test module (tests use keys of their own)."""
    server = start_redis()
    yield server
    destroy(server)


@pytest.fixture
def durable_redis() -> Iterator[RedisServer]:
    """A server of the test's own, with an append-only file: it may be stopped and started again."""
    server = start_redis(durable=True)
    yield server
    destroy(server)
