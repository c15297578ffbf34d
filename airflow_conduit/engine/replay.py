"""``airflow-conduit replay``: push a pipeline's DLQ records back through its processors and destinations.

The replay is the pipeline itself with its sources replaced: a ``builtin:file`` source reads replay files
written from the DLQ (one DLQ record per line, as stored) one record per micro-batch, and a first
processor (:func:`~airflow_conduit.dlq_tools.unwrap_dlq_record`, Conduit's ``unwrap.opencdc``) turns each line back into the failed
record, its ``.Payload.After``. Everything lives under ``STATE/PIPELINE/replay/``::

    inbox/            replay files, written atomically; the replay source reads them in name order
    PIPELINE/         the replay's own state dir: checkpoint, DLQ (records that failed again), audit log
    replayed.jsonl    the DLQ entries replayed successfully: a later replay skips them

DLQ entries acknowledged as such (the UI's acknowledge button: ``acked.jsonl`` lines naming the entry) are
never queued: someone decided that record is not to be written. A poison record's ack
(``airflow-conduit ack``) names no entry: its DLQ entry is replayed once the cause is fixed.

The replay checkpoint makes a repeated replay resume where the last one stopped, so nothing is written
twice; a DLQ entry is identified by its DLQ file and line. Entries that fail again land in the replay's
DLQ and are queued again by the next ``replay`` (after the cause was fixed).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_conduit.config.model import ConnectorConfig, PipelineConfig, ProcessorConfig
from airflow_conduit.config.settings.file import FileSourceSettings
from airflow_conduit.config.settings.log import LogDestinationSettings
from airflow_conduit.config.settings.python import CustomPythonSettings
from airflow_conduit.dlq_tools import DLQEntry, acknowledged, entry_id, read_dlq, replay
from airflow_conduit.errors import EXIT_STOPPED
from airflow_conduit.record import position_text
from airflow_conduit.replay_state import ReplayLine, ReplayPaths, ReplayStatus, read_replayed, replay_status
from airflow_conduit.state import ExitPayload, PipelineState, RunRecords, current_user

__all__ = [  # the bookkeeping lives in replay_state (no Spark): its names are still importable here
    "ReplayLine",
    "ReplayPaths",
    "ReplayPlan",
    "ReplayStatus",
    "plan_replay",
    "read_replayed",
    "replay_dlq",
    "replay_pipeline",
    "replay_status",
]

SOURCE_ID = "replay-dlq"
UNWRAP_ID = "replay-unwrap"
UNWRAP_FUNCTION = "airflow_conduit.dlq_tools:unwrap_dlq_record"


def replay_pipeline(pipeline: PipelineConfig, inbox: Path) -> PipelineConfig:
    """The pipeline with its sources replaced by the replay files, read one record per micro-batch, and
    the unwrap step first. Its DLQ takes every nack (window-size 0): a record that fails again is kept in
    the replay's DLQ instead of stopping the replay."""
    source = ConnectorConfig(
        id=SOURCE_ID,
        type="source",
        plugin="builtin:file",
        settings=FileSourceSettings.model_validate({"path": str(inbox), "maxRecordsPerBatch": 1}),
        node_id=f"{pipeline.id}:{SOURCE_ID}",
    )
    unwrap = ProcessorConfig(
        id=UNWRAP_ID,
        plugin="custom.python",
        settings=CustomPythonSettings(function=UNWRAP_FUNCTION),
        node_id=f"{pipeline.id}:{UNWRAP_ID}",
    )
    dlq = dataclasses.replace(
        pipeline.dlq,
        plugin="builtin:log",
        settings=LogDestinationSettings(level="warn", message="replayed record failed again"),
        window_size=0,
    )
    return dataclasses.replace(
        pipeline,
        connectors=(source, *pipeline.destinations),
        processors=(unwrap, *pipeline.processors),
        dlq=dlq,
    )


@dataclass(frozen=True)
class ReplayPlan:
    to_queue: tuple[DLQEntry, ...]
    """New entries, and entries that failed again: written to a new replay file."""
    pending: int
    """Entries queued by an earlier replay that did not finish: the checkpoint resumes them."""
    already_replayed: int
    dlq_records: int
    acknowledged: int = 0
    """Entries left out because they were acknowledged as DLQ entries (and not replayed before)."""


def plan_replay(paths: ReplayPaths, only: Collection[str] | None = None) -> ReplayPlan:
    """What a replay sends: every DLQ entry not yet replayed nor acknowledged, or of those only the
    entries ``only`` names (``FILE:LINE``: the records of one DLQ asset event, say)."""
    entries = read_dlq(paths.state.dlq_dir)
    if only is not None:
        wanted = set(only)
        entries = [e for e in entries if entry_id(e) in wanted]
    status = replay_status(paths)
    acked = acknowledged(paths.state, entries) - status.succeeded
    to_queue = tuple(
        e
        for e in entries
        if entry_id(e) not in status.succeeded
        and entry_id(e) not in status.pending
        and entry_id(e) not in acked
    )
    return ReplayPlan(to_queue, len(status.pending), len(status.succeeded), len(entries), len(acked))


def queue(paths: ReplayPaths, entries: tuple[DLQEntry, ...]) -> Path | None:
    """Write the DLQ records of ``entries`` as a new replay file (the name sorts after earlier ones)."""
    return replay(entries, paths.inbox)[0]


def replay_dlq(
    spark: Any,
    pipeline: PipelineConfig,
    state_dir: str | Path,
    *,
    dry_run: bool = False,
    only: Collection[str] | None = None,
) -> dict[str, Any]:
    """Replay the pipeline's DLQ; returns the summary (also written to the pipeline's audit log).

    :param spark: a SparkSession, or a function that makes one: called only when there is something to
        replay (never with ``dry_run``)
    :param pipeline: the pipeline as its file defines it now (with the fix, if the fix is in the file)
    :param state_dir: the state dir the pipeline runs with
    :param dry_run: only report what would be replayed
    :param only: replay only these DLQ entries (``FILE:LINE``); entries an earlier, interrupted replay
        queued are still resumed by the checkpoint
    """
    from airflow_conduit.engine.job import RunOptions
    from airflow_conduit.engine.runner import run_pipeline

    state = PipelineState(Path(state_dir), pipeline.id)
    paths = ReplayPaths(state)
    plan = plan_replay(paths, only)
    summary: dict[str, Any] = {
        "pipeline": pipeline.id,
        "dlq_records": plan.dlq_records,
        "already_replayed": plan.already_replayed,
        "acknowledged": plan.acknowledged,
        "to_replay": len(plan.to_queue) + plan.pending,
        "dry_run": dry_run,
        "replay_dir": str(paths.root),
    }
    if dry_run:
        summary["positions"] = [position_text(e.position) for e in plan.to_queue]
        return summary
    before = replay_status(paths)
    if plan.to_queue:
        queue(paths, plan.to_queue)
    ran: ExitPayload | None = None
    if plan.to_queue or plan.pending:
        session = spark() if callable(spark) else spark
        ran = ExitPayload.from_dict(
            run_pipeline(
                session, replay_pipeline(pipeline, paths.inbox), paths.root, RunOptions(until_idle=True)
            )
        )
    after = replay_status(paths)
    newly = after.succeeded - before.succeeded
    _record_replayed(paths, sorted(newly))
    records = ran.counters if ran is not None else RunRecords()
    # Failed entries are queued again above, so those failed now failed in this run.
    failed_again = len(after.failed)
    summary.update(
        {
            "replayed": len(after.processed_lines - before.processed_lines),
            "delivered": len(newly) - records.filtered,
            "filtered": records.filtered,
            "failed_again": failed_again,
            "remaining": len(after.pending),
            "written": dict(records.written),
            "exit_code": ran.exit_code if ran is not None else EXIT_STOPPED,
            "error": ran.error.to_dict() if ran is not None and ran.error is not None else None,
            "replay_dlq": str(paths.replay_state.dlq_dir),
        }
    )
    state.audit(
        "replayed",
        user=current_user(),
        **{k: summary[k] for k in ("replayed", "delivered", "filtered", "failed_again", "remaining")},
        error=summary["error"],
    )
    return summary


def _record_replayed(paths: ReplayPaths, entries: list[str]) -> None:
    if not entries:
        return
    paths.root.mkdir(parents=True, exist_ok=True)
    with paths.replayed_file.open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps({"entry": e}) + "\n" for e in entries))
