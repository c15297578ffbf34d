"""A throwaway PostgreSQL cluster for the tests, chaos runs and benchmarks.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user. The cluster
listens on 127.0.0.1 only, on a free port, with logical replication enabled (the CDC source needs it)
and durability switched off (``fsync=off``: a test cluster, not a database).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "postgres"
PASSWORD = "s3cret-Pw"  # noqa: S105 - a throwaway test cluster
APP_USER = "conduit"
APP_PASSWORD = "conduit-Pw-42"  # noqa: S105


def _bindir() -> Path:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise RuntimeError("PostgreSQL server binaries not found: apt-get install postgresql")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@dataclass
class PostgresCluster:
    """One running cluster; ``url()`` gives a connection URL for a user and database."""

    root: Path
    port: int
    bindir: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        password = password if password is not None else (PASSWORD if user == SUPERUSER else APP_PASSWORD)
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def jdbc_url(self, database: str = "postgres") -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str) -> None:
        cmd = [str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-w", "-t", "60", *args]
        subprocess.run(_as_server_user(cmd), check=True, capture_output=True)

    def start(self) -> None:
        self._ctl("-l", str(self.root / "server.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def is_running(self) -> bool:
        cmd = [str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "status"]
        return subprocess.run(_as_server_user(cmd), capture_output=True).returncode == 0

    def execute(self, sql: str, database: str = "postgres", params: tuple = ()) -> list[tuple]:
        """Run SQL as the superuser (autocommit); rows of the last statement, if it returned any."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cursor = conn.execute(sql, params or None)
            return cursor.fetchall() if cursor.description else []

    def create_database(self, name: str) -> str:
        """A fresh database owned by the app user; returns the app user's URL for it."""
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.execute(f'CREATE DATABASE "{name}" OWNER {APP_USER}')
        return self.url(name, APP_USER)

    def destroy(self) -> None:
        if self.is_running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> PostgresCluster:
    """initdb, configure and start a cluster under a new temp dir."""
    bindir = _bindir()
    root = Path(tempfile.mkdtemp(prefix="conduit-pg-"))
    os.chmod(root, 0o755)
    pwfile = root / "pwfile"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    data = root / "data"
    initdb = [
        str(bindir / "initdb"),
        "-D",
        str(data),
        "-U",
        SUPERUSER,
        "--pwfile",
        str(pwfile),
        "--auth-host=scram-sha-256",
        "--auth-local=trust",
        "-E",
        "UTF8",
        "--locale=C",
    ]
    subprocess.run(_as_server_user(initdb), check=True, capture_output=True)
    cluster = PostgresCluster(root, _free_port(), bindir)
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "port": str(cluster.port),
        "unix_socket_directories": f"'{root}'",
        "wal_level": "logical",
        "max_replication_slots": "20",
        "max_wal_senders": "20",
        "max_connections": "100",
        "fsync": "off",
        "full_page_writes": "off",
        "shared_buffers": "128MB",
    }
    with open(data / "postgresql.conf", "a") as conf:
        conf.writelines(f"{name} = {value}\n" for name, value in settings.items())
    cluster.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            cluster.execute(f"CREATE ROLE {APP_USER} LOGIN REPLICATION PASSWORD '{APP_PASSWORD}'")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return cluster
