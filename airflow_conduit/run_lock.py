"""One writer per pipeline: an exclusive lock on ``STATE_DIR/PIPELINE_ID/run.lock`` (pure Python).

The engine holds the lock for the whole run, so two engines never drive one pipeline's state dir at once
(two DAG runs, a retry beside a zombie ``spark-submit``, the CLI beside Airflow). It is a ``flock`` on an
open file: the kernel drops it when the holding process dies, so a SIGKILL never leaves a stale lock.
The file's content names the holder (host, pid, start time, and who started it), for the refusal message,
``airflow-conduit status`` and a retrying Airflow task that wants to reattach to its own earlier engine.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

LOCK_FILE = "run.lock"

OWNER_ENV = "CONDUIT_RUN_OWNER"
"""Set by whoever starts the engine (the Airflow operator: DAG, task, run and map index) to be recognised."""
TRY_ENV = "CONDUIT_RUN_TRY"
"""The Airflow try number of the task that started the engine (informational)."""

ACQUIRE_PATIENCE = 1.0
"""Seconds a starting engine keeps trying before it is refused: covers a reader's probe of the lock."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds a pipeline's run lock."""

    host: str
    pid: int
    started_at: str
    owner: str | None = None
    try_number: int | None = None

    @classmethod
    def of_this_process(cls, started_at: str) -> LockHolder:
        try_text = os.environ.get(TRY_ENV, "")
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=started_at,
            owner=os.environ.get(OWNER_ENV) or None,
            try_number=int(try_text) if try_text.isdigit() else None,
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        text = f"host {self.host}, pid {self.pid}, since {self.started_at}"
        if self.owner:
            text += f", started by {self.owner}" + (f" try {self.try_number}" if self.try_number else "")
        return text


class PipelineLocked(Exception):
    """Another engine runs this pipeline."""

    def __init__(self, pipeline_id: str, holder: LockHolder | None) -> None:
        who = holder.describe() if holder else "a process that has not named itself yet"
        super().__init__(
            f"pipeline {pipeline_id} is already running ({who}); this run was refused. Wait for it to "
            f"end, or stop it with `airflow-conduit stop {pipeline_id}`"
        )
        self.holder = holder


class RunLock:
    """The run lock of one pipeline; a context manager that holds it while the engine runs."""

    def __init__(self, root: Path, pipeline_id: str) -> None:
        self.path = root / LOCK_FILE
        self.pipeline_id = pipeline_id
        self._fd: int | None = None

    def acquire(self, holder: LockHolder, patience: float = ACQUIRE_PATIENCE) -> None:
        """Take the lock and name ``holder`` in it, or raise :class:`PipelineLocked`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise PipelineLocked(self.pipeline_id, read_holder(self.path)) from None
                time.sleep(0.05)
        # Rewritten in place: replacing the file would put the next engine's lock on another inode.
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder.to_dict()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def read_holder(path: Path) -> LockHolder | None:
    """The holder named in a lock file (without asking whether the lock is held)."""
    for _ in range(20):  # a holder may be between truncating and writing the file
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        if text:
            try:
                return LockHolder(**json.loads(text))
            except (ValueError, TypeError):
                pass
        time.sleep(0.01)
    return None


def current_holder(root: Path) -> LockHolder | None:
    """The engine holding the pipeline's run lock now, or ``None`` when no engine runs it.

    Probes with a shared lock, which an engine's exclusive lock refuses; a starting engine waits out
    the probe (:data:`ACQUIRE_PATIENCE`).
    """
    path = root / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_holder(path) or LockHolder(host="?", pid=0, started_at="?")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
