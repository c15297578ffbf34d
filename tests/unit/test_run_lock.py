"""The run lock: one engine per pipeline, released by the kernel when the holder dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_conduit.run_lock import LockHolder, PipelineLocked, RunLock, current_holder

HOLD = """\
import sys, time
from pathlib import Path
from airflow_conduit.run_lock import LockHolder, RunLock
lock = RunLock(Path(sys.argv[1]), "p")
lock.acquire(LockHolder.of_this_process("2026-11-24T00:00:00Z"))
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder_process(tmp_path: Path):
    """Another process holding the pipeline's lock (as an engine would), started by `airflow`/try 2."""
    env = {**os.environ, "CONDUIT_RUN_OWNER": "dag/task/run/-1", "CONDUIT_RUN_TRY": "2"}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    yield process
    process.kill()
    process.wait()


def test_a_second_engine_is_refused_with_the_holder_named(tmp_path, holder_process):
    with pytest.raises(PipelineLocked) as refused:
        RunLock(tmp_path, "p").acquire(LockHolder.of_this_process("now"), patience=0.2)
    holder = refused.value.holder
    assert holder == LockHolder(
        host=socket.gethostname(),
        pid=holder_process.pid,
        started_at="2026-11-24T00:00:00Z",
        owner="dag/task/run/-1",
        try_number=2,
    )
    message = str(refused.value)
    assert f"pid {holder_process.pid}" in message and socket.gethostname() in message
    assert "airflow-conduit stop p" in message
    assert current_holder(tmp_path) == holder


def test_sigkill_of_the_holder_leaves_no_stale_lock(tmp_path, holder_process):
    assert current_holder(tmp_path) is not None
    holder_process.send_signal(signal.SIGKILL)
    holder_process.wait()
    assert current_holder(tmp_path) is None
    lock = RunLock(tmp_path, "p")
    lock.acquire(LockHolder.of_this_process("later"), patience=0)
    assert current_holder(tmp_path).pid == os.getpid()
    lock.release()
    assert current_holder(tmp_path) is None


def test_two_locks_in_one_process_exclude_each_other(tmp_path):
    """flock is per open file: two engines in one process (tests, notebooks) are refused too."""
    with RunLock(tmp_path, "p") as first:
        first.acquire(LockHolder.of_this_process("now"))
        with pytest.raises(PipelineLocked):
            RunLock(tmp_path, "p").acquire(LockHolder.of_this_process("now"), patience=0.1)
    RunLock(tmp_path, "p").acquire(LockHolder.of_this_process("now"), patience=0)


def test_a_probe_does_not_refuse_an_engine_that_starts_meanwhile(tmp_path):
    """`status` probes the lock; an engine starting in that instant waits the probe out."""
    import threading

    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            current_holder(tmp_path)

    (tmp_path / "run.lock").touch()
    prober = threading.Thread(target=probe)
    prober.start()
    try:
        for _ in range(50):
            lock = RunLock(tmp_path, "p")
            lock.acquire(LockHolder.of_this_process("now"))
            lock.release()
            time.sleep(0.001)
    finally:
        stop.set()
        prober.join()
