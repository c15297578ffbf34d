"""A throwaway NATS server with JetStream for the tests, chaos runs and benchmarks.

Debian's ``nats-server`` (the CI image installs it; a missing binary fails the test, it never skips)
listens on 127.0.0.1 only, on a free port, with its JetStream store in a temporary directory. ``stop``
and ``start`` keep the store, so a test can take the server away mid-run and bring it back.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

SERVER = "/usr/sbin/nats-server"
T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class NatsServer:
    """One nats-server process; ``url`` is its client URL."""

    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    user: str = ""
    password: str = field(default="", repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = shutil.which("nats-server") or SERVER
        args = [binary, "-js", "-sd", str(self.root / "js"), "-a", "127.0.0.1", "-p", str(self.port)]
        if self.user:
            args += ["--user", self.user, "--pass", self.password]
        log = (self.root / "server.log").open("ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start listening within 30 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None

    def call(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``work(jetstream_context)`` on a fresh connection (test set-up and checks)."""

        async def run() -> T:
            import nats

            client = await nats.connect(self.url, allow_reconnect=False)
            try:
                return await work(client.jetstream())
            finally:
                await client.close()

        return asyncio.run(run())

    def add_stream(self, name: str, subjects: list[str], **config: Any) -> None:
        from nats.js.api import StreamConfig

        self.call(lambda js: js.add_stream(StreamConfig(name=name, subjects=subjects, **config)))

    def publish(self, subject: str, bodies: list[bytes]) -> None:
        async def send(js: Any) -> None:
            for start in range(0, len(bodies), 500):
                acks = [js.publish(subject, body) for body in bodies[start : start + 500]]
                await asyncio.gather(*acks)

        self.call(send)

    def stream_bodies(self, stream: str) -> list[bytes]:
        """Every message the stream holds, in stream order."""

        async def read(js: Any) -> list[bytes]:
            info = await js.stream_info(stream)
            bodies = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                if info.state.messages == 0:
                    break
                bodies.append((await js.get_msg(stream, seq)).data or b"")
            return bodies

        return self.call(read)

    def consumer_info(self, stream: str, durable: str) -> Any:
        return self.call(lambda js: js.consumer_info(stream, durable))


def start_nats(user: str = "", password: str = "") -> NatsServer:
    """A server on a free loopback port; with ``user``, clients must give that user and password."""
    root = Path(tempfile.mkdtemp(prefix="nats-test-"))
    server = NatsServer(root, _free_port(), user=user, password=password)
    server.start()
    return server


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A NATS server with JetStream for one test, removed after it."""
    server = start_nats()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
