"""``airflow-conduit inspect``, ``ack`` and ``replay``: a pipeline's records after it stopped on one
(argument parsing and output only; the work is in :mod:`airflow_conduit.engine.inspect_batches`,
:mod:`airflow_conduit.state` and :mod:`airflow_conduit.engine.replay`)."""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from typing import Any

from airflow_conduit.cli._common import fail, load_pipeline_file, setup_logging
from airflow_conduit.errors import EXIT_CONFIG, EXIT_STOPPED
from airflow_conduit.state import DEFAULT_STATE_DIR, PipelineState, current_user

INSPECT_HELP = """\
Show the records of a micro-batch (or of a range of batches) as the sources read them, before any
processor: Spark's offset log in STATE_DIR/PIPELINE_ID/checkpoint/offsets/ fixes each batch's range per
source (from the previous batch's offsets, or the source's initial offset, to the batch's own), and each
source's stream reader reads that range again in plain Python (no Spark). Also shows whether the batch
is committed (acked by every destination and the DLQ) and how many records each source contributed.
A batch that stopped the pipeline (a poison record) is the last one, not committed: find the record
here, then acknowledge it with `airflow-conduit ack`. The Postgres source reads snapshot and polling
pages again as the rows are now, and a CDC batch's changes from the replication slot until the batch
commits (PostgreSQL releases them then; inspect says so)."""

ACK_HELP = """\
Acknowledge a poison record without writing it: its position is added to STATE_DIR/PIPELINE_ID/
acked.jsonl (with an `acked` audit event) and the next run skips the record, so a pipeline that stops
on it again and again (DLQ threshold exceeded, FatalError from custom.python) gets past it. POSITION is
the text `airflow-conduit dlq`, `status`, `inspect` and the exit payload show (e.g. 17 for the
generator, orders.jsonl:1024 for the file source), or with --base64 the stored base64 form."""

REPLAY_HELP = """\
Push the DLQ's records back through the pipeline (its processors and destinations, as FILE defines
them now), one record per micro-batch, after the cause of their failure was fixed. Records that fail
again go to the replay's own DLQ (STATE_DIR/PIPELINE_ID/replay/PIPELINE_ID/dlq) and are tried again by
the next replay; records replayed successfully are never replayed again. An interrupted replay resumes
from its checkpoint instead of writing records twice. Prints a summary; exit codes as for `run`."""


def add_commands(commands: Any) -> None:
    """Register ``inspect``, ``ack`` and ``replay`` on the CLI's subparsers."""
    raw = argparse.RawDescriptionHelpFormatter
    inspect = commands.add_parser(
        "inspect", help="show the records of a micro-batch", description=INSPECT_HELP, formatter_class=raw
    )
    inspect.add_argument("file", metavar="FILE", help="pipeline file (Conduit YAML)")
    inspect.add_argument("--pipeline", metavar="ID", help="the pipeline (default: the file's only one)")
    inspect.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    which = inspect.add_mutually_exclusive_group(required=True)
    which.add_argument("--batch", type=int, metavar="N", help="the micro-batch id")
    which.add_argument("--from-batch", type=int, metavar="A", help="first batch of a range (with --to-batch)")
    inspect.add_argument("--to-batch", type=int, metavar="B", help="last batch of the range (inclusive)")
    inspect.add_argument("--json", action="store_true", help="print JSON (records in OpenCDC JSON form)")
    inspect.add_argument(
        "--limit", type=int, default=100, metavar="K", help="records shown per batch, 0 = all (default: 100)"
    )
    inspect.set_defaults(handler=cmd_inspect)

    ack = commands.add_parser(
        "ack",
        help="acknowledge a poison record: the pipeline skips it",
        description=ACK_HELP,
        formatter_class=raw,
    )
    ack.add_argument("pipeline", metavar="PIPELINE_ID")
    ack.add_argument("position", metavar="POSITION")
    ack.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    ack.add_argument("--reason", default="", metavar="TEXT", help="why; kept in the audit log")
    ack.add_argument("--source", metavar="CONNECTOR_ID", help="only for this source (default: any source)")
    ack.add_argument("--base64", action="store_true", help="POSITION is base64 (as in OpenCDC JSON)")
    ack.set_defaults(handler=cmd_ack)

    replay = commands.add_parser(
        "replay", help="replay the DLQ through the pipeline", description=REPLAY_HELP, formatter_class=raw
    )
    replay.add_argument("file", metavar="FILE", help="pipeline file (Conduit YAML)")
    replay.add_argument("--pipeline", metavar="ID", help="the pipeline (default: the file's only one)")
    replay.add_argument("--state-dir", default=DEFAULT_STATE_DIR, metavar="DIR")
    replay.add_argument("--master", default=None, metavar="URL", help="Spark master (default: local[*])")
    replay.add_argument("--dry-run", action="store_true", help="only show what would be replayed")
    replay.add_argument(
        "--entry",
        action="append",
        metavar="FILE:LINE",
        help="replay only this DLQ entry (repeatable; as `dlq` and a DLQ asset event name them)",
    )
    replay.set_defaults(handler=cmd_replay)


def _pipeline(args: argparse.Namespace):
    """The pipeline named by --pipeline (or the file's only one), and its state; ``None`` after a message."""
    loaded = load_pipeline_file(args.file)
    if loaded is None:
        return None
    if args.pipeline:
        try:
            pipeline = loaded.get(args.pipeline)
        except KeyError as missing:
            fail(missing.args[0])
            return None
    elif len(loaded.pipelines) == 1:
        pipeline = loaded.pipelines[0]
    else:
        fail(
            f"{args.file} has several pipelines ({', '.join(p.id for p in loaded.pipelines)}): name one with --pipeline"
        )
        return None
    state = PipelineState.of(args.state_dir, pipeline.id)
    if not state.root.is_dir():
        fail(
            f"no pipeline {pipeline.id!r} in {args.state_dir}: run it first (or pass the --state-dir it ran with)"
        )
        return None
    return pipeline, state


def cmd_inspect(args: argparse.Namespace) -> int:
    if args.from_batch is not None and args.to_batch is None:
        return fail("--from-batch needs --to-batch")
    if args.batch is not None and args.to_batch is not None:
        return fail("--to-batch goes with --from-batch, not --batch")
    found = _pipeline(args)
    if found is None:
        return EXIT_CONFIG
    pipeline, state = found
    from airflow_conduit.engine.inspect_batches import inspect_batches
    from airflow_conduit.errors import ConduitError
    from airflow_conduit.offsets import OffsetLogError

    first, last = (args.batch, args.batch) if args.batch is not None else (args.from_batch, args.to_batch)
    try:
        batches = inspect_batches(pipeline, state, first, last)
    except (OffsetLogError, ConduitError) as error:  # ConduitError: a source's server, say
        return fail(str(error))
    limit = args.limit if args.limit > 0 else None
    if args.json:
        print(json.dumps({"pipeline": pipeline.id, "batches": [b.to_dict(limit) for b in batches]}, indent=1))
        return EXIT_STOPPED
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    for batch in batches:
        committed = (
            "committed" if batch.committed else "NOT committed (in flight, or the pipeline stopped on it)"
        )
        table = Table(title=f"{pipeline.id} batch {batch.batch_id}: {batch.count} records, {committed}")
        for column in ("source", "position", "operation", "metadata", "key", "payload"):
            table.add_column(column, overflow="fold")
        shown = batch.records if limit is None else batch.records[:limit]
        for item in shown:
            record = item.record
            metadata = {k: v for k, v in record["metadata"].items() if k != "conduit.source.connector.id"}
            table.add_row(
                item.source,
                item.position_text + (" (acked: skipped)" if item.acked else ""),
                record["operation"],
                json.dumps(metadata) if metadata else "",
                _show(record["key"]),
                _show_payload(record["payload"]),
            )
        console.print(table)
        for source in batch.sources:
            what = f"not read again: {source.unreadable}" if source.unreadable else f"{source.count} records"
            console.print(
                f"  source {source.source} ({source.plugin}): {what}, "
                f"offsets {json.dumps(source.start)} -> {json.dumps(source.end)}",
                soft_wrap=True,
            )
        if len(shown) < len(batch.records):
            console.print(f"  ({len(batch.records) - len(shown)} more records; --limit 0 shows all)")
    return EXIT_STOPPED


def _show(value: Any) -> str:
    """Structured data as JSON; raw data (base64 in OpenCDC JSON) as text where it is UTF-8."""
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            return value
    return json.dumps(value)


def _show_payload(payload: dict[str, Any]) -> str:
    before, after = _show(payload.get("before")), _show(payload.get("after"))
    return f"before: {before}\nafter: {after}" if before else after


def position_bytes(text: str, is_base64: bool) -> bytes:
    """A position as the engine stores it; ``ValueError`` for base64 that does not decode."""
    if is_base64:
        return base64.b64decode(text, validate=True)
    return text.encode()


def cmd_ack(args: argparse.Namespace) -> int:
    state = PipelineState.of(args.state_dir, args.pipeline)
    if not state.root.is_dir():
        return fail(f"no pipeline {args.pipeline!r} in {args.state_dir}: check the id and --state-dir")
    try:
        position = position_bytes(args.position, args.base64)
    except (binascii.Error, ValueError):
        return fail(f"{args.position!r} is not base64; drop --base64 to give the position as text")
    entry = state.ack(position, reason=args.reason, user=current_user(), source=args.source)
    where = f" of source {args.source}" if args.source else ""
    print(
        f"acked position {entry['position_text']}{where} of {args.pipeline}: the next run skips that record "
        f"({state.acked_file})"
    )
    return EXIT_STOPPED


def cmd_replay(args: argparse.Namespace) -> int:
    found = _pipeline(args)
    if found is None:
        return EXIT_CONFIG
    pipeline, state = found
    from airflow_conduit.engine.replay import replay_dlq

    def spark():  # started only when there is something to replay
        from airflow_conduit.engine.session import get_session

        setup_logging()
        return get_session(args.master)

    summary = replay_dlq(spark, pipeline, args.state_dir, dry_run=args.dry_run, only=args.entry)
    if args.dry_run:
        print(
            f"{pipeline.id}: {summary['to_replay']} of {summary['dlq_records']} DLQ records would be replayed "
            f"({summary['already_replayed']} already replayed, {summary['acknowledged']} acknowledged)"
        )
        for position in summary["positions"]:
            print(f"  {position}")
    else:
        print(
            f"{pipeline.id}: replayed {summary['replayed']}, delivered {summary['delivered']}, "
            f"filtered {summary['filtered']}, failed again {summary['failed_again']} "
            f"(in {summary['replay_dlq']}), remaining {summary['remaining']}, "
            f"already replayed before {summary['already_replayed']}",
            file=sys.stderr,
        )
        if summary["error"]:
            error = summary["error"]
            print(
                f"replay stopped: {error['kind']} error {error['code']}: {error['message']}", file=sys.stderr
            )
    print(json.dumps(summary), flush=True)
    return int(summary.get("exit_code", EXIT_STOPPED))
