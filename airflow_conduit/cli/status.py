"""``airflow-conduit status``, ``dlq`` and ``stop``: read and signal a pipeline through its state dir."""

from __future__ import annotations

import argparse
import json
from typing import Any

from airflow_conduit.cli._common import fail
from airflow_conduit.errors import EXIT_STOPPED
from airflow_conduit.run_lock import LockHolder, current_holder
from airflow_conduit.state import DEFAULT_STATE_DIR, PipelineState, Status, list_pipelines


def add_commands(commands: Any) -> None:
    """Register ``status``, ``dlq`` and ``stop`` on the CLI's subparsers."""
    status = commands.add_parser("status", help="each pipeline's status, counters and last error")
    status.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(handler=cmd_status)

    dlq = commands.add_parser("dlq", help="the DLQ records of a pipeline, with their errors")
    dlq.add_argument("pipeline", metavar="PIPELINE_ID")
    dlq.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    dlq.add_argument("--json", action="store_true", help="print the DLQ records as OpenCDC JSON lines")
    dlq.set_defaults(handler=cmd_dlq)

    stop = commands.add_parser("stop", help="ask a running pipeline to stop gracefully")
    stop.add_argument("pipeline", metavar="PIPELINE_ID")
    stop.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    stop.set_defaults(handler=cmd_stop)


def cmd_status(args: argparse.Namespace) -> int:
    states = list_pipelines(args.state_dir)
    report = []
    for state in states:
        status = state.read_status() or {}
        last_run = state.read_exit()
        # status.json is the newer word; exit.json speaks for a pipeline that never wrote one.
        last_records = None if last_run is None else last_run.to_dict()["records"]
        holder = current_holder(state.root)
        report.append(
            {
                "pipeline": state.pipeline_id,
                "status": status.get("status", last_run.status if last_run is not None else "unknown"),
                "updated_at": status.get("updated_at"),
                "counters": status.get("counters") or last_records,
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
        if status_text == Status.RECOVERING and entry["next_start_at"]:
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
        elif entry["status"] == Status.RUNNING:
            console.print(
                f"{entry['pipeline']}: says running, but no engine holds its lock: the last run was killed "
                "before it could write how it ended",
                soft_wrap=True,
            )
    return EXIT_STOPPED


def cmd_dlq(args: argparse.Namespace) -> int:
    state = PipelineState.of(args.state_dir, args.pipeline)
    if not state.root.is_dir():
        return fail(f"no pipeline {args.pipeline!r} in {args.state_dir}")
    from airflow_conduit.dlq_tools import read_dlq
    from airflow_conduit.record import position_text

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
