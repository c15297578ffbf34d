"""``airflow-conduit``: validate, run and inspect Conduit pipelines on Spark."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from airflow_conduit import operator_cli
from airflow_conduit.errors import EXIT_CONFIG, EXIT_FATAL, EXIT_STOPPED, EXIT_TRANSIENT
from airflow_conduit.run_lock import LockHolder, current_holder
from airflow_conduit.state import DEFAULT_STATE_DIR, PipelineState, list_pipelines

DESCRIPTION = """\
Run Conduit pipeline files (YAML, format 2.2) on Apache Spark.

exit codes: 0 stopped gracefully, 1 fatal (the pipeline is degraded; retrying will not help),
75 transient (a restart may succeed), 2 bad config or usage."""

RUN_HELP = """\
Run the pipelines of FILE (all whose status is running, or the one named by --pipeline) until they
stop: by themselves with --until-idle, on SIGTERM/Ctrl-C (the batch in flight completes and commits,
within --stop-timeout), or on an error. Progress goes to stderr; the exit payload (JSON) is written to
STATE_DIR/PIPELINE_ID/exit.json and printed as the last line of stdout."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-conduit", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser("validate", help="check a pipeline file; print its pipeline ids")
    validate.add_argument("file", metavar="FILE", help="pipeline file (Conduit YAML)")

    run = commands.add_parser(
        "run",
        help="run a pipeline file on Spark",
        description=RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("file", metavar="FILE", help="pipeline file (Conduit YAML)")
    run.add_argument(
        "--pipeline", metavar="ID", help="run only this pipeline (default: all with status running)"
    )
    run.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help="checkpoints, DLQ store, status, audit log, exit payload (default: %(default)s)",
    )
    run.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master (default: local[*]; under spark-submit, spark-submit's own)",
    )
    run.add_argument(
        "--until-idle", action="store_true", help="process what the sources hold now, then stop gracefully"
    )
    run.add_argument(
        "--stop-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long the batch in flight may take after a stop request (default: 30)",
    )
    run.add_argument(
        "--recover",
        action="store_true",
        help="restart after transient failures with backoff (Conduit's error recovery)",
    )

    status = commands.add_parser("status", help="each pipeline's status, counters and last error")
    status.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")

    dlq = commands.add_parser("dlq", help="the DLQ records of a pipeline, with their errors")
    dlq.add_argument("pipeline", metavar="PIPELINE_ID")
    dlq.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    dlq.add_argument("--json", action="store_true", help="print the DLQ records as OpenCDC JSON lines")

    stop = commands.add_parser("stop", help="ask a running pipeline to stop gracefully")
    stop.add_argument("pipeline", metavar="PIPELINE_ID")
    stop.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    operator_cli.add_commands(commands)  # inspect, ack, replay
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_CONFIG if exit_.code not in (0, None) else EXIT_STOPPED
    handler = {
        "validate": cmd_validate,
        "run": cmd_run,
        "status": cmd_status,
        "dlq": cmd_dlq,
        "stop": cmd_stop,
        **operator_cli.HANDLERS,
    }
    return handler[args.command](args)


def _load(path: str):
    from airflow_conduit.config import ConfigError, load_pipeline_file

    try:
        return load_pipeline_file(path)
    except ConfigError as error:
        print(str(error), file=sys.stderr)
        return None
    except OSError as error:
        print(f"{path}: cannot read the pipeline file: {error.strerror or error}", file=sys.stderr)
        return None


def cmd_validate(args: argparse.Namespace) -> int:
    pipelines = _load(args.file)
    if pipelines is None:
        return EXIT_CONFIG
    for pipeline in pipelines.pipelines:
        print(pipeline.id)
    return EXIT_STOPPED


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cmd_run(args: argparse.Namespace) -> int:
    from airflow_conduit.engine.runner import RunRequest, run_pipelines

    pipeline_file = _load(args.file)
    if pipeline_file is None:
        return EXIT_CONFIG
    if args.pipeline:
        try:
            selected = [pipeline_file.get(args.pipeline)]
        except KeyError as missing:
            print(missing.args[0], file=sys.stderr)
            return EXIT_CONFIG
    else:
        selected = [p for p in pipeline_file.pipelines if p.status == "running"]
        if not selected:
            print(f"{args.file}: no pipeline has status running; name one with --pipeline", file=sys.stderr)
            return EXIT_CONFIG
    _setup_logging()
    request = RunRequest(
        pipelines=tuple(selected),
        state_dir=Path(args.state_dir),
        master=args.master,
        until_idle=args.until_idle,
        stop_timeout=args.stop_timeout,
        recover=args.recover,
    )
    payloads = run_pipelines(request, install_signal_handlers=_install_signal_handlers)
    for payload in payloads:
        print_summary(payload)
    for payload in payloads:
        print(json.dumps(payload), flush=True)
    return worst_exit_code(p["exit_code"] for p in payloads)


def worst_exit_code(codes) -> int:
    codes = set(codes)
    for code in (EXIT_CONFIG, EXIT_FATAL, EXIT_TRANSIENT):
        if code in codes:
            return code
    return max(codes) if codes else EXIT_STOPPED


def _install_signal_handlers(on_stop) -> None:
    def handle(signum, frame):
        logging.getLogger("airflow_conduit").warning(
            "received %s: stopping gracefully", signal.Signals(signum).name
        )
        on_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def print_summary(payload: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    # emoji=False: node ids such as "orders:ledger:" are not emoji codes.
    console = Console(stderr=True, highlight=False, emoji=False)
    records = payload["records"]
    table = Table(title=f"pipeline {payload['pipeline']}: {payload['status']} (exit {payload['exit_code']})")
    table.add_column("records")
    table.add_column("count", justify="right")
    for name in ("read", "acked", "filtered", "nacked", "dlq"):
        table.add_row(name, str(records[name]))
    for destination, count in records["written"].items():
        table.add_row(f"written to {destination}", str(count))
    table.add_row("batches", str(payload["batches"]))
    table.add_row("seconds", f"{payload.get('duration_seconds', 0):.1f}")
    console.print(table)
    if payload["error"]:
        error = payload["error"]
        console.print(
            f"[bold]{error['kind']} error[/] {error['code']} at {error['node']}: {error['message']}"
        )
    if records["dlq"]:
        console.print(f"DLQ records: {payload['dlq']['path']}  (airflow-conduit dlq {payload['pipeline']})")


def cmd_status(args: argparse.Namespace) -> int:
    states = list_pipelines(args.state_dir)
    report = []
    for state in states:
        status = state.read_status() or {}
        exit_payload = state.read_exit_payload() or {}
        holder = current_holder(state.root)
        report.append(
            {
                "pipeline": state.pipeline_id,
                "status": status.get("status", exit_payload.get("status", "unknown")),
                "updated_at": status.get("updated_at"),
                "counters": status.get("counters") or exit_payload.get("records"),
                "error": status.get("error"),
                "recovery": status.get("recovery"),
                "attempt": status.get("attempt"),
                "next_start_at": status.get("next_start_at"),
                "last_events": state.read_audit()[-5:],
                "engine": holder.to_dict() if holder else None,
            }
        )
    if args.json:
        print(json.dumps(report, indent=1))
        return EXIT_STOPPED
    if not report:
        print(f"no pipelines in {args.state_dir}")
        return EXIT_STOPPED
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"pipelines in {args.state_dir}")
    for column in ("pipeline", "status", "read", "acked", "nacked", "updated", "last error"):
        table.add_column(column)
    for entry in report:
        counters = entry["counters"] or {}
        error = entry["error"] or {}
        status_text = entry["status"]
        if status_text == "recovering" and entry["next_start_at"]:
            status_text += f" (attempt {entry['attempt']}, next start {entry['next_start_at']})"
        table.add_row(
            entry["pipeline"],
            status_text,
            str(counters.get("read", "")),
            str(counters.get("acked", "")),
            str(counters.get("nacked", "")),
            entry["updated_at"] or "",
            f"{error.get('kind')}/{error.get('code')}: {error.get('message')}" if error else "",
        )
    console = Console(highlight=False)
    console.print(table)
    for entry in report:
        if entry["engine"]:
            console.print(
                f"{entry['pipeline']}: run by {LockHolder(**entry['engine']).describe()}", soft_wrap=True
            )
        elif entry["status"] == "running":
            console.print(
                f"{entry['pipeline']}: says running, but no engine holds its lock: the last run was killed "
                "before it could write how it ended",
                soft_wrap=True,
            )
    return EXIT_STOPPED


def cmd_dlq(args: argparse.Namespace) -> int:
    state = PipelineState.of(args.state_dir, args.pipeline)
    if not state.root.is_dir():
        print(f"no pipeline {args.pipeline!r} in {args.state_dir}", file=sys.stderr)
        return EXIT_CONFIG
    from airflow_conduit.dlq_tools import position_text, read_dlq

    entries = read_dlq(state.dlq_dir)
    if args.json:
        for entry in entries:
            print(json.dumps(entry.dlq_record))
        return EXIT_STOPPED
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"DLQ of {args.pipeline}: {len(entries)} records ({state.dlq_dir})")
    for column in ("position", "node", "error", "record"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        failed = entry.record or {}
        table.add_row(
            position_text(entry.position) or "",
            entry.node or "",
            entry.error or "",
            json.dumps((failed.get("payload") or {}).get("after"))[:200],
        )
    Console(highlight=False).print(table)
    return EXIT_STOPPED


def cmd_stop(args: argparse.Namespace) -> int:
    state = PipelineState.of(args.state_dir, args.pipeline)
    state.request_stop()
    print(f"stop requested for {args.pipeline}; it stops after the batch in flight commits")
    return EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(main())
