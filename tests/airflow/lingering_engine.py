"""A stand-in engine that leaves a process behind when it exits, for ConduitHook's process handling.

Takes the engine's arguments (``FILE --pipeline ID --state-dir DIR [--until-idle]``); FILE is JSON
``{"linger": SECONDS, "pid_file": PATH}``. It starts a child that sleeps ``linger`` seconds (in the
engine's session, as Spark's Python workers are), writes the child's pid to ``pid_file``, prints a few
lines like Spark's and an exit payload line, and exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    settings = json.loads(Path(argv[0]).read_text())
    child = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({float(settings['linger'])})"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    Path(settings["pid_file"]).write_text(str(child.pid))
    print("26/01/01 00:00:00 INFO SparkContext: Running Spark version 4.2.0", flush=True)
    print("2026-01-01 00:00:00,000 INFO airflow_conduit.engine: p: starting (until idle)", flush=True)
    print(json.dumps({"pipeline": argv[2], "status": "stopped", "exit_code": 0, "records": {}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
