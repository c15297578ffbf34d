"""SIGKILL of the engine mid-run from the command line: nothing acknowledged is lost and nothing is
written twice (moved here from tests/integration/test_cli.py: it kills processes and takes most of a
minute)."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.conftest import read_jsonl, text
from tests.integration.test_cli import CLI, cli, commits, env_for, pipeline_file, wait_for

pytestmark = pytest.mark.chaos
__all__ = ["pipeline_file"]  # the fixture, used by name


def test_sigkill_mid_run_loses_no_acknowledged_record(pipeline_file, tmp_path):
    state = tmp_path / "state"
    process = subprocess.Popen(
        [*CLI, "run", str(pipeline_file), "--state-dir", str(state)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env_for(tmp_path, 3000, 400)},
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(commits(state)) >= 2, 120, "two committed batches")
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its JVM, without warning
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    acknowledged = len(commits(state))
    assert acknowledged > 0
    # The kernel dropped the killed engine's run lock: status says no engine runs it, the restart runs.
    status = json.loads(cli("status", "--state-dir", str(state), "--json").stdout)
    assert status[0]["status"] == "running" and status[0]["engine"] is None
    # Restart from the checkpoint; at full speed until the source is drained.
    result = cli(
        "run", str(pipeline_file), "--until-idle", "--state-dir", str(state), env=env_for(tmp_path, 3000, 0)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    keys = [int(text(r["key"])) for r in read_jsonl(tmp_path / "out")]
    expected = [k for k in range(3000) if k % 500 != 7]
    assert sorted(set(keys)) == expected  # nothing lost
    assert len(keys) == len(expected)  # and a replayed batch replaced its own files: no duplicates
