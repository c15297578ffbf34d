"""A stand-in for the engine under spark-submit, for fast tests of the Airflow side.

Takes the engine's arguments (``FILE --pipeline ID --state-dir DIR [--until-idle]``); FILE is a JSON
scenario ``{"runs": [{"exit_code": 75, "error": {...}, "records": {...}, "dlq": 2}, ...]}``: run n plays
entry n (the last one repeats). It writes what the engine writes - status, audit events, the exit payload
(``"write_exit_json": false`` leaves it out), DLQ records - and prints the payload as its last line
(``"print_payload": false`` does not).

``"refused": true`` plays a run the pipeline's lock refused. ``"foreign_exit_json": {...}`` is written to ``exit.json`` as another engine's, ended meanwhile.

``"detach_seconds": N`` plays an engine whose worker died under it: a process in its own session takes
the pipeline's run lock (named after the task, as the real engine does), ends gracefully N seconds
later, while this run reports a transient failure at once.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_conduit.run_origin import airflow_context
from airflow_conduit.state import PipelineState, utc_now

STATUS = {0: "stopped", 1: "degraded", 2: "degraded", 75: "failed"}

DETACHED = """
import json, sys, time
from pathlib import Path
from airflow_conduit.run_lock import LockHolder, RunLock
from airflow_conduit.state import PipelineState, utc_now
state = PipelineState.of(sys.argv[1], sys.argv[2])
lock = RunLock(state.root, state.pipeline_id)
started = utc_now()
lock.acquire(LockHolder.of_this_process(started))
print("locked", flush=True)
time.sleep(float(sys.argv[3]))
records = {"read": 7, "acked": 7, "filtered": 0, "nacked": 0, "dlq": 0, "written": {}}
payload = {"pipeline": state.pipeline_id, "status": "stopped", "exit_code": 0, "error": None,
           "records": records, "batches": 1, "started_at": started, "ended_at": utc_now()}
state.write_exit_payload(payload)
state.write_status("stopped", error=None)
state.audit("stopped", detached=True)
lock.release()
"""


def detach(state: PipelineState, seconds: float) -> None:
    """Start the engine that outlives its worker; return once it holds the lock."""
    child = subprocess.Popen(
        [sys.executable, "-c", DETACHED, str(state.state_dir), state.pipeline_id, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"


def dlq_line(pipeline: str, n: int, i: int, code: str) -> str:
    position = base64.b64encode(f"{n}-{i}".encode()).decode()
    failed = {
        "position": position,
        "operation": "create",
        "metadata": {"opencdc.collection": "orders"},
        "key": {"id": i},
        "payload": {"before": None, "after": {"id": i, "amount": i * 10}},
    }
    return json.dumps(
        {
            "position": position,
            "operation": "create",
            "metadata": {
                "conduit.dlq.nack.error": f"{code}: amount is a multiple of 10",
                "conduit.dlq.nack.node.id": f"{pipeline}:reject",
            },
            "key": {"id": i},
            "payload": {"before": None, "after": failed},
        }
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--until-idle", action="store_true")
    args = parser.parse_args(argv)
    scenario = json.loads(Path(args.file).read_text())
    state = PipelineState.of(args.state_dir, args.pipeline)
    state.root.mkdir(parents=True, exist_ok=True)
    counter = state.root / "fake_runs"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    runs = scenario["runs"]
    run = runs[min(n, len(runs) - 1)]
    started = utc_now()
    if run.get("refused"):  # the run lock refused it: the real engine writes nothing but its payload line
        error = {"kind": "transient", "code": "pipeline_locked", "message": "pipeline p is already running"}
        print(json.dumps({"pipeline": args.pipeline, "status": "failed", "exit_code": 75, "error": error}))
        return 75
    if "detach_seconds" in run:
        detach(state, float(run["detach_seconds"]))
    state.write_status("running", error=None)
    # As the engine's started event: the task instance, from the environment the job was given.
    state.audit("started", run=n + 1, until_idle=args.until_idle, airflow=airflow_context(os.environ))
    dlq = int(run.get("dlq", 0))
    if dlq:
        state.dlq_dir.mkdir(parents=True, exist_ok=True)
        lines = [dlq_line(args.pipeline, n, i, run.get("dlq_code", "error_processor")) for i in range(dlq)]
        (state.dlq_dir / f"{n:06d}.jsonl").write_text("\n".join(lines) + "\n")
    exit_code = int(run["exit_code"])
    records = {"read": 0, "acked": 0, "filtered": 0, "nacked": dlq, "dlq": dlq, "written": {}}
    records.update(run.get("records", {}))
    payload = {
        "pipeline": args.pipeline,
        "status": STATUS.get(exit_code, "failed"),
        "exit_code": exit_code,
        "error": run.get("error"),
        "records": records,
        "batches": 1,
        "started_at": started,
        "ended_at": utc_now(),
    }
    if run.get("write_exit_json", True):
        state.write_exit_payload(payload)
    if "foreign_exit_json" in run:  # the engine holding the lock ended meanwhile and wrote its own
        state.write_exit_payload(run["foreign_exit_json"])
    state.write_status(payload["status"], error=payload["error"])
    state.audit("stopped" if exit_code == 0 else "fault", error=payload["error"])
    print("fake engine: some progress output")
    if run.get("print_payload", True):
        print(json.dumps(payload), flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
