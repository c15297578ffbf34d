"""The UI's replay button: ``airflow-conduit replay`` started in the background for a signed-in user
(no FastAPI, no Airflow: the routes in ``app.py`` call it).

The replay needs the pipeline file, the Spark master and the working directory the pipeline ran with: they
come from the latest ``started`` audit event (the engine records ``file``, ``master`` and ``cwd``). It runs as a child process of the API
server with ``$CONDUIT_USER`` set to the Airflow user, so its ``replayed`` audit event names that user
(:func:`airflow_conduit.state.current_user`). Its output goes to ``STATE/PIPELINE/replay.log``; while it
runs, ``STATE/PIPELINE/replay.pid`` names it, and a second replay is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_conduit.plugins.overview import latest_event
from airflow_conduit.state import USER_ENV, PipelineState, utc_now

PID_FILE = "replay.pid"
LOG_FILE = "replay.log"

_children: dict[int, subprocess.Popen[bytes]] = {}
"""Replays this process started: polled, so a finished one is reaped rather than left a zombie."""


class ReplayRefused(Exception):
    """A replay cannot start; the message says what to do."""


@dataclass(frozen=True)
class Replay:
    pid: int
    log: Path
    user: str = ""
    started_at: str | None = None


def pid_file(state: PipelineState) -> Path:
    return state.root / PID_FILE


def log_file(state: PipelineState) -> Path:
    return state.root / LOG_FILE


def _alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        del _children[pid]
        return False
    # Started by another API server process (or before a restart): a live process that is a replay.
    proc = Path("/proc") / str(pid)
    if proc.is_dir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[:1] != ["Z"] and b"replay" in cmdline
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return sys.platform != "linux"  # no /proc entry on Linux: gone


def running(state: PipelineState) -> Replay | None:
    """The replay started from the UI that still runs, if any (a stale pid file is removed)."""
    path = pid_file(state)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        pid = int(data["pid"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return None
    if not _alive(pid):
        path.unlink(missing_ok=True)
        return None
    return Replay(
        pid, Path(data.get("log") or log_file(state)), data.get("user") or "", data.get("started_at")
    )


def command(state: PipelineState, pipeline_file: str, master: str) -> list[str]:
    """``airflow-conduit replay FILE --pipeline ID --state-dir DIR --master M``, with the console script
    of this interpreter's environment (else the CLI module run by this interpreter)."""
    script = Path(sys.executable).parent / "airflow-conduit"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "airflow_conduit.cli"]
    return [
        *head,
        "replay",
        pipeline_file,
        "--pipeline",
        state.pipeline_id,
        "--state-dir",
        str(Path(state.state_dir).resolve()),
        "--master",
        master,
    ]


def _how(state: PipelineState) -> str:
    return (
        f"airflow-conduit replay FILE --pipeline {state.pipeline_id} "
        f"--state-dir {Path(state.state_dir).resolve()} --master URL"
    )


@dataclass(frozen=True)
class ReplayPlan:
    """What the latest run was started with, for a replay that means the same."""

    pipeline_file: str
    master: str
    cwd: str
    """The run's working directory: relative paths in the pipeline file (a file destination's ``path``)
    are read against it. Runs that did not record one: the pipeline file's directory."""


def plan(state: PipelineState) -> ReplayPlan:
    """The pipeline file, Spark master and working directory of the latest run; :class:`ReplayRefused`
    when the file or master is unknown or the file is not here."""
    started = latest_event(state, "started") or {}
    pipeline_file, master = started.get("file"), started.get("master")
    if not pipeline_file or not master:
        raise ReplayRefused(
            f"The runs of {state.pipeline_id} did not record their pipeline file and Spark master, so the "
            "UI cannot tell what to replay with: run the pipeline once with this version of airflow-conduit, "
            f"or replay from a shell: {_how(state)}"
        )
    if not Path(pipeline_file).is_file():
        raise ReplayRefused(
            f"The pipeline file {pipeline_file} of the latest run of {state.pipeline_id} is not on the "
            f"Airflow API server: replay where the file is: {_how(state)}"
        )
    cwd = started.get("cwd")
    if not cwd or not Path(cwd).is_dir():
        cwd = str(Path(pipeline_file).parent)
    return ReplayPlan(str(pipeline_file), str(master), str(cwd))


def start(state: PipelineState, *, user: str) -> Replay:
    """Start the replay in the background and audit ``replay_requested``; :class:`ReplayRefused` when the
    file or master is unknown or a replay already runs."""
    state.root.mkdir(parents=True, exist_ok=True)
    # One request at a time past the check, so two clicks never start two replays.
    with (state.root / f".{PID_FILE}.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        current = running(state)
        if current is not None:
            by = f" by {current.user}" if current.user else ""
            raise ReplayRefused(
                f"A replay of {state.pipeline_id} is already running (pid {current.pid}, started{by} at "
                f"{current.started_at}): wait for it to finish; its output is in {current.log}"
            )
        how = plan(state)
        env = dict(os.environ)
        if user:
            env[USER_ENV] = user
        # Spark's Python workers need this interpreter (DESIGN §5), as the API server has no Spark setup.
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        log = log_file(state)
        argv = command(state, how.pipeline_file, how.master)
        with log.open("wb") as out:
            out.write(
                f"{utc_now()} in {how.cwd}: {' '.join(argv)} (for {user or 'an unnamed user'})\n".encode()
            )
            out.flush()
            child = subprocess.Popen(  # noqa: S603 - our own CLI, arguments from the state dir
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                # Relative paths in the pipeline file mean what they meant in the run.
                cwd=how.cwd,
                start_new_session=True,
            )
        _children[child.pid] = child
        replay = Replay(child.pid, log, user, utc_now())
        record: dict[str, Any] = {
            "pid": replay.pid,
            "log": str(log),
            "user": user,
            "started_at": replay.started_at,
        }
        pid_file(state).write_text(json.dumps(record) + "\n", encoding="utf-8")
    state.audit(
        "replay_requested",
        user=user,
        pid=replay.pid,
        log=str(log),
        file=how.pipeline_file,
        master=how.master,
        cwd=how.cwd,
    )
    return replay
