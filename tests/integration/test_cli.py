"""The command line contract (DESIGN.md §4), run as users run it: as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import read_jsonl, text

CLI = [sys.executable, "-m", "airflow_conduit.cli"]

PIPELINE = """\
version: "2.2"
pipelines:
  - id: clitest
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: ${COUNT}
          rate: ${RATE}
          maxRecordsPerBatch: 200
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: ${OUT}
    processors:
      - id: odd
        plugin: error
        condition: "CAST(.Key AS INT) % 500 = 7"
        settings: {message: "seven"}
    dead-letter-queue:
      plugin: builtin:file
      settings: {path: "${OUT}-dlq"}
      window-size: 0
"""


def cli(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, **kwargs
    )


@pytest.fixture
def pipeline_file(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    return path


def env_for(tmp_path: Path, count: int, rate: int) -> dict[str, str]:
    return {"COUNT": str(count), "RATE": str(rate), "OUT": str(tmp_path / "out")}


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def commits(state: Path) -> list[int]:
    directory = state / "clitest" / "checkpoint" / "commits"
    return sorted(int(p.name) for p in directory.glob("[0-9]*")) if directory.is_dir() else []


def test_help_explains_commands_and_exit_codes():
    result = cli("--help")
    assert result.returncode == 0
    for word in ("validate", "run", "status", "dlq", "75 transient"):
        assert word in result.stdout
    run_help = cli("run", "--help").stdout
    assert "--until-idle" in run_help and "--state-dir" in run_help and "exit.json" in run_help


def test_validate_prints_pipeline_ids(pipeline_file, tmp_path):
    result = cli("validate", str(pipeline_file), env=env_for(tmp_path, 10, 0))
    assert result.returncode == 0 and result.stdout.split() == ["clitest"]


def test_validate_prints_conduits_warnings_and_accepts_the_file(tmp_path):
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(PIPELINE.replace("  - id: clitest\n", "  - id: clitest\n    colour: blue\n"))
    result = cli("validate", str(lenient), env=env_for(tmp_path, 10, 0))
    assert result.returncode == 0 and result.stdout.split() == ["clitest"]
    assert f"warning: {lenient}:4: pipelines[0].colour: unknown field 'colour' is ignored" in result.stderr


def test_hostile_files_are_refused_with_exit_2(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    levels = ['l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 10)]
    bomb.write_text('version: "2.2"\n' + "\n".join(levels) + "\npipelines: *l9\n")
    result = cli("validate", str(bomb))
    assert result.returncode == 2 and "aliases expand the document by more than" in result.stderr
    big = tmp_path / "big.yaml"
    big.write_text(PIPELINE)
    result = cli("validate", str(big), env={"CONDUIT_MAX_PIPELINE_FILE_BYTES": "64"})
    assert result.returncode == 2 and "more than the 64 a pipeline file may have" in result.stderr


def test_validate_refuses_a_bad_file_with_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(PIPELINE.replace("plugin: builtin:file", "plugin: builtin:nope"))
    result = cli("validate", str(bad), env=env_for(tmp_path, 10, 0))
    assert result.returncode == 2
    assert f"{bad}:14: pipelines[0].connectors[1].plugin: unknown plugin 'builtin:nope'" in result.stderr


def test_run_with_a_bad_file_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: '2.2'\npipelines: []\n")
    assert cli("run", str(bad), "--until-idle", "--state-dir", str(tmp_path / "s")).returncode == 2
    assert cli("run", str(tmp_path / "missing.yaml")).returncode == 2
    assert cli("run").returncode == 2  # usage


def test_a_pipeline_without_destination_validates_with_a_warning_and_run_refuses_it(tmp_path):
    # As Conduit: its validator passes the file, and the pipeline fails when it starts.
    source_only = tmp_path / "source-only.yaml"
    source_only.write_text(
        "version: '2.2'\npipelines:\n  - id: lonely\n    connectors:\n"
        "      - {id: gen, type: source, plugin: builtin:generator}\n"
    )
    validated = cli("validate", str(source_only))
    assert validated.returncode == 0 and "has no destination connector: it cannot run" in validated.stderr
    ran = cli("run", str(source_only), "--until-idle", "--state-dir", str(tmp_path / "s"))
    assert ran.returncode == 2
    assert "pipeline 'lonely' has no destination connector; add one to run it" in ran.stderr
    assert not (tmp_path / "s").exists()  # refused before anything started


def test_run_until_idle_prints_the_exit_payload_last(pipeline_file, tmp_path):
    state = tmp_path / "state"
    result = cli(
        "run", str(pipeline_file), "--until-idle", "--state-dir", str(state), env=env_for(tmp_path, 1000, 0)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload == json.loads((state / "clitest" / "exit.json").read_text())
    assert payload["status"] == "stopped" and payload["error"] is None
    assert payload["records"]["read"] == 1000 and payload["records"]["dlq"] == 2  # keys 7 and 507
    assert payload["records"]["written"] == {"clitest:out": 998}
    assert "batch 4: 200 records" in result.stderr  # progress
    assert "written to clitest:out" in result.stderr  # summary

    status = json.loads(cli("status", "--state-dir", str(state), "--json").stdout)
    assert status[0]["pipeline"] == "clitest" and status[0]["status"] == "stopped"
    assert status[0]["counters"]["read"] == 1000
    assert [e["event"] for e in status[0]["last_events"]][-2:] == ["started", "stopped"]
    started = status[0]["last_events"][-2]
    assert (started["file"], started["cwd"], started["master"], started["airflow"]) == (
        str(pipeline_file.resolve()),
        os.getcwd(),  # the CLI ran in this process's directory; a UI replay runs there too
        "local[*]",
        None,
    )
    batches = (state / "clitest" / "batches.jsonl").read_text().splitlines()
    assert len(batches) == payload["batches"] and sum(json.loads(b)["read"] for b in batches) == 1000
    dlq = cli("dlq", "clitest", "--state-dir", str(state), "--json")
    dlq_records = [json.loads(line) for line in dlq.stdout.splitlines()]
    assert [text(r["position"]) for r in dlq_records] == ["7", "507"]
    assert {r["metadata"]["conduit.dlq.nack.error"] for r in dlq_records} == {"seven"}
    assert "seven" in cli("dlq", "clitest", "--state-dir", str(state)).stdout


def test_sigterm_stops_gracefully_after_the_batch_in_flight(pipeline_file, tmp_path):
    state = tmp_path / "state"
    process = subprocess.Popen(
        [*CLI, "run", str(pipeline_file), "--state-dir", str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env_for(tmp_path, 100_000, 400)},
    )
    try:
        wait_for(lambda: len(commits(state)) >= 2, 120, "two committed batches")
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr[-3000:]
    payload = json.loads(stdout.strip().splitlines()[-1])
    assert payload["status"] == "stopped"
    offsets = sorted(int(p.name) for p in (state / "clitest" / "checkpoint" / "offsets").glob("[0-9]*"))
    assert offsets == commits(state)  # every batch begun was committed: none left in flight
    keys = sorted(int(text(r["key"])) for r in read_jsonl(tmp_path / "out"))
    assert len(keys) == payload["records"]["written"]["clitest:out"]
    assert keys == [k for k in range(payload["records"]["read"]) if k % 500 != 7]


def test_a_second_run_of_a_running_pipeline_is_refused_at_once_naming_the_first(pipeline_file, tmp_path):
    state = tmp_path / "state"
    first = subprocess.Popen(
        [*CLI, "run", str(pipeline_file), "--state-dir", str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env_for(tmp_path, 100_000, 400)},
    )
    try:
        wait_for(lambda: len(commits(state)) >= 1, 120, "a committed batch")
        status_before = (state / "clitest" / "status.json").read_text()
        second = cli(
            "run", str(pipeline_file), "--until-idle", "--state-dir", str(state), env=env_for(tmp_path, 10, 0)
        )
        assert second.returncode == 75, second.stderr[-3000:]
        payload = json.loads(second.stdout.strip().splitlines()[-1])
        assert payload["status"] == "failed" and payload["records"]["read"] == 0
        assert payload["error"]["kind"] == "transient" and payload["error"]["code"] == "pipeline_locked"
        assert f"pid {first.pid}" in payload["error"]["message"]
        assert socket.gethostname() in payload["error"]["message"]
        # The refused run left the running one's status and exit payload alone; the audit log says it.
        assert not (state / "clitest" / "exit.json").exists()
        assert (
            json.loads(status_before)["started_at"]
            == json.loads((state / "clitest" / "status.json").read_text())["started_at"]
        )
        audit = [json.loads(line) for line in (state / "clitest" / "audit.jsonl").read_text().splitlines()]
        assert [e["holder"]["pid"] for e in audit if e["event"] == "refused"] == [first.pid]
        status = json.loads(cli("status", "--state-dir", str(state), "--json").stdout)
        assert status[0]["status"] == "running" and status[0]["engine"]["pid"] == first.pid
        assert f"pid {first.pid}" in cli("status", "--state-dir", str(state)).stdout

        assert cli("stop", "clitest", "--state-dir", str(state)).returncode == 0
        first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0
    assert json.loads(cli("status", "--state-dir", str(state), "--json").stdout)[0]["engine"] is None
    keys = [int(text(r["key"])) for r in read_jsonl(tmp_path / "out")]
    assert len(keys) == len(set(keys))


FLAKY = """\
import os
import time

from airflow_conduit.errors import TransientError


def until_deadline(record):
    # Transient for some seconds after the first call: a downstream system that comes back.
    marker = os.environ["FLAKY_MARKER"]
    if not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(str(time.time() + float(os.environ["FLAKY_SECONDS"])))
    with open(marker) as fh:
        if time.time() < float(fh.read()):
            raise TransientError("downstream unavailable")
    return record
"""


def test_run_recover_restarts_after_transient_failures(tmp_path):
    (tmp_path / "flaky.py").write_text(FLAKY)
    pipeline = tmp_path / "flaky.yaml"
    pipeline.write_text(
        PIPELINE.replace("clitest", "flaky").replace(
            "    processors:\n",
            "    processors:\n"
            "      - id: flaky\n"
            "        plugin: custom.python\n"
            f"        settings: {{function: 'flaky:until_deadline', path: '{tmp_path}'}}\n",
        )
    )
    state = tmp_path / "state"
    env = {
        **env_for(tmp_path, 500, 0),
        "FLAKY_MARKER": str(tmp_path / "flaky-until"),
        "FLAKY_SECONDS": "8",
        "AIRFLOW__CONDUIT__MIN_DELAY": "1",
        "AIRFLOW__CONDUIT__MAX_RETRIES": "20",
    }
    result = cli(
        "run", str(pipeline), "--until-idle", "--recover", "--state-dir", str(state), env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["status"] == "stopped"
    events = [
        json.loads(line)["event"] for line in (state / "flaky" / "audit.jsonl").read_text().splitlines()
    ]
    assert events.count("fault") >= 1 and "restarted" in events  # it failed, backed off, restarted
    assert events[-1] == "stopped"
    keys = sorted(int(text(r["key"])) for r in read_jsonl(tmp_path / "out"))
    assert keys == [k for k in range(500) if k % 500 != 7]  # every record delivered once
