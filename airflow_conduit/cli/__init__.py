"""``airflow-conduit``: validate, run and inspect Conduit pipelines on Spark.

One module per group of commands, each registering its subcommands with a handler: :mod:`.run`
(validate, run), :mod:`.status` (status, dlq, stop) and :mod:`.records` (inspect, ack, replay: a
pipeline's records after it stopped on one). Spark is imported only by the commands that run it.
"""

from __future__ import annotations

import argparse

from airflow_conduit.cli import records, run, status
from airflow_conduit.errors import EXIT_CONFIG, EXIT_STOPPED

DESCRIPTION = """\
Run Conduit pipeline files (YAML, format 2.2) on Apache Spark.

exit codes: 0 stopped gracefully, 1 fatal (the pipeline is degraded; retrying will not help),
75 transient (a restart may succeed), 2 bad config or usage."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-conduit", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run.add_commands(commands)  # validate, run
    status.add_commands(commands)  # status, dlq, stop
    records.add_commands(commands)  # inspect, ack, replay
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``airflow-conduit`` console script; returns the exit code (DESIGN §4)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_CONFIG if exit_.code not in (0, None) else EXIT_STOPPED
    handler: run.Handler = args.handler
    return handler(args)


__all__ = ["build_parser", "main"]
