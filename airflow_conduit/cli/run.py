"""``airflow-conduit validate`` and ``airflow-conduit run``."""

from __future__ import annotations

import argparse
import json
import logging
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from airflow_conduit.cli._common import fail, load_pipeline_file, setup_logging
from airflow_conduit.errors import EXIT_CONFIG, EXIT_FATAL, EXIT_STOPPED, EXIT_TRANSIENT
from airflow_conduit.state import DEFAULT_STATE_DIR, ExitPayload

Handler = Callable[[argparse.Namespace], int]

RUN_HELP = """\
Run the pipelines of FILE (all whose status is running, or the one named by --pipeline) until they
stop: by themselves with --until-idle, on SIGTERM/Ctrl-C (the batch in flight completes and commits,
within --stop-timeout), or on an error. Progress goes to stderr; the exit payload (JSON) is written to
STATE_DIR/PIPELINE_ID/exit.json and printed as the last line of stdout."""


def add_commands(commands: Any) -> None:
    """Register ``validate`` and ``run`` on the CLI's subparsers."""
    validate = commands.add_parser("validate", help="check a pipeline file; print its pipeline ids")
    validate.add_argument("file", metavar="FILE", help="pipeline file (Conduit YAML)")
    validate.set_defaults(handler=cmd_validate)

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
    run.set_defaults(handler=cmd_run)


def cmd_validate(args: argparse.Namespace) -> int:
    pipelines = load_pipeline_file(args.file)
    if pipelines is None:
        return EXIT_CONFIG
    for pipeline in pipelines.pipelines:
        print(pipeline.id)
    return EXIT_STOPPED


def cmd_run(args: argparse.Namespace) -> int:
    from airflow_conduit.engine.runner import RunRequest, run_pipelines

    pipeline_file = load_pipeline_file(args.file)
    if pipeline_file is None:
        return EXIT_CONFIG
    if args.pipeline:
        try:
            selected = [pipeline_file.get(args.pipeline)]
        except KeyError as missing:
            return fail(missing.args[0])
    else:
        selected = [p for p in pipeline_file.pipelines if p.status == "running"]
        if not selected:
            return fail(f"{args.file}: no pipeline has status running; name one with --pipeline")
    problems = [problem for p in selected if (problem := p.cannot_run())]
    if problems:
        return fail("\n".join(f"{args.file}: {problem}" for problem in problems))
    setup_logging()
    request = RunRequest(
        pipelines=tuple(selected),
        state_dir=Path(args.state_dir),
        master=args.master,
        until_idle=args.until_idle,
        stop_timeout=args.stop_timeout,
        recover=args.recover,
        pipeline_file=Path(args.file).resolve(),
    )
    payloads = run_pipelines(request, install_signal_handlers=_install_signal_handlers)
    for payload in payloads:
        print_summary(ExitPayload.from_dict(payload))
    for payload in payloads:
        print(json.dumps(payload), flush=True)  # as written to exit.json
    return worst_exit_code(p["exit_code"] for p in payloads)


def worst_exit_code(codes: Iterable[int]) -> int:
    """The exit code of a run of several pipelines: a config mistake, then fatal, then transient."""
    seen = set(codes)
    for code in (EXIT_CONFIG, EXIT_FATAL, EXIT_TRANSIENT):
        if code in seen:
            return code
    return max(seen) if seen else EXIT_STOPPED


def _install_signal_handlers(on_stop: Callable[[], None]) -> None:
    def handle(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("airflow_conduit").warning(
            "received %s: stopping gracefully", signal.Signals(signum).name
        )
        on_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def print_summary(payload: ExitPayload) -> None:
    """The end-of-run table on stderr: the records' fates, per destination, and the error if any."""
    from rich.console import Console
    from rich.table import Table

    # emoji=False: node ids such as "orders:ledger:" are not emoji codes.
    console = Console(stderr=True, highlight=False, emoji=False)
    records = payload.counters
    table = Table(title=f"pipeline {payload.pipeline}: {payload.status} (exit {payload.exit_code})")
    table.add_column("records")
    table.add_column("count", justify="right")
    for name, count in (
        ("read", records.read),
        ("acked", records.acked),
        ("filtered", records.filtered),
        ("nacked", records.nacked),
        ("dlq", records.dlq),
    ):
        table.add_row(name, str(count))
    for destination, written in records.written.items():
        table.add_row(f"written to {destination}", str(written))
    table.add_row("batches", str(payload.batches or 0))
    table.add_row("seconds", f"{payload.duration_seconds or 0:.1f}")
    console.print(table)
    if payload.error is not None:
        error = payload.error
        console.print(f"[bold]{error.kind} error[/] {error.code} at {error.node}: {error.message}")
    if records.dlq and payload.dlq:
        console.print(f"DLQ records: {payload.dlq['path']}  (airflow-conduit dlq {payload.pipeline})")
