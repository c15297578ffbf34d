"""A stand-in for the engine under spark-submit, for fast tests of the Airflow side.

Takes the engine's arguments (``FILE --pipeline ID --state-dir DIR [--until-idle]``); FILE is a JSON
scenario ``{"runs": [{"exit_code": 75, "error": {...}, "records": {...}, "dlq": 2}, ...]}``: run n plays
entry n (the last one repeats). It writes what the engine writes - status, audit events, the exit payload
(``"write_exit_json": false`` leaves it out), DLQ records - and prints the payload as its last line
(``"print_payload": false`` does not).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

from airflow_conduit.state import PipelineState, utc_now

STATUS = {0: "stopped", 1: "degraded", 2: "degraded", 75: "failed"}


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
    state.write_status("running", error=None)
    state.audit("started", run=n + 1, until_idle=args.until_idle)
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
    state.write_status(payload["status"], error=payload["error"])
    state.audit("stopped" if exit_code == 0 else "fault", error=payload["error"])
    print("fake engine: some progress output")
    if run.get("print_payload", True):
        print(json.dumps(payload), flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
