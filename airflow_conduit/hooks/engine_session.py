"""The engine's processes: a session of their own, ended as a whole (Linux ``/proc``, else ``killpg``)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def engine_processes(sid: int) -> dict[int, int] | None:
    """The live processes of the engine's session, as pid: process group (``None`` without ``/proc``).

    A session, not a process group: PySpark's worker daemon makes a group of its own (``os.setpgid``)
    but stays in the session. Zombies are not counted: where nothing reaps orphans (an init that
    does not), exited processes stay in the table for good.
    """
    if not os.path.exists("/proc/self/stat"):
        return None
    processes = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": state ppid pgrp session ...
        if len(fields) > 3 and fields[0] != "Z" and fields[3] == str(sid):
            processes[int(entry)] = int(fields[2])
    return processes


def engine_alive(sid: int) -> bool:
    processes = engine_processes(sid)
    if processes is not None:
        return bool(processes)
    try:  # without /proc: the group spark-submit led
        os.killpg(sid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_engine(sid: int, wait: float = 10.0) -> None:
    """SIGKILL every process of the engine's session, group by group (a group of a session member
    lies within the session), until none is left or ``wait`` seconds passed."""
    deadline = time.monotonic() + wait
    while engine_alive(sid) and time.monotonic() < deadline:
        processes = engine_processes(sid)
        for group in {sid} if processes is None else set(processes.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        time.sleep(0.05)
