"""A person's review of DLQ records or of a degraded pipeline's poison records (pure Python: no Airflow,
no Spark): what the review form shows, and what each answer does to the state dir.

:class:`~airflow_conduit.operators.dlq_review.ConduitDLQReviewOperator` asks; this module renders the
question (:func:`review_body`) and carries out the answer: ``acknowledge`` (:func:`acknowledge`, as the
Conduit UI's DLQ browser does: ``acked.jsonl`` lines with who and why), ``replay`` (``airflow-conduit replay
--entry ...``, :func:`replay_command`; its result read back with :func:`replay_outcome`) or ``leave``.
Every answer ends in one ``dlq_reviewed`` audit event (:func:`audit_review`), which the Conduit UI page
shows in words.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from airflow_conduit import dlq_tools
from airflow_conduit.dlq_tools import DLQEntry, entry_id
from airflow_conduit.errors import Code
from airflow_conduit.offsets import OffsetLog
from airflow_conduit.record import position_text
from airflow_conduit.replay_state import ReplayPaths, replay_status
from airflow_conduit.state import ExitPayload, PipelineState, Status

REVIEWED_EVENT = "dlq_reviewed"
"""The audit event of every answered review."""


class ReviewAction(StrEnum):
    """The options of the review form (their values are what the form shows)."""

    REPLAY = "replay"
    """DLQ records: push them through the pipeline as its file defines them now (``airflow-conduit
    replay``). Poison records: resume the pipeline as it is (the cause was fixed)."""
    ACKNOWLEDGE = "acknowledge"
    """Skip them for good: never written, never replayed; who and why go to the audit log. Poison
    records: then resume the pipeline past them."""
    LEAVE = "leave"
    """Do nothing now: the records stay where they are (the DLQ, or the degraded pipeline)."""


class ReviewKind(StrEnum):
    DLQ = "dlq"
    """The records of DLQ asset events."""
    POISON = "poison"
    """The records that stopped a degraded pipeline (DLQ threshold exceeded, a fatal error)."""


@dataclass(frozen=True)
class ReviewRecord:
    """One record under review, as the form shows it."""

    id: str
    """The DLQ entry (``FILE:LINE``), or for a poison record its position (text)."""
    position: str
    node: str | None
    error: str | None
    record: Mapping[str, Any] | None
    position_bytes: bytes | None = None
    source: str | None = None
    """The source that read it (the connector id), for an acknowledgement of this source only."""

    @classmethod
    def of_entry(cls, entry: DLQEntry, pipeline_id: str) -> ReviewRecord:
        return cls(
            id=entry_id(entry),
            position=position_text(entry.position) or "",
            node=entry.node,
            error=entry.error,
            record=entry.record,
            position_bytes=entry.position_bytes,
            source=dlq_tools.source_id(entry, pipeline_id),
        )


@dataclass
class ReviewOutcome:
    """What an answer did, for the task log, the audit log, the return value and the Conduit UI."""

    kind: ReviewKind
    action: ReviewAction
    records: int
    user: str = ""
    reason: str = ""
    timed_out: bool = False
    replayed: int = 0
    failed_again: int = 0
    skipped: int = 0
    left: int = 0
    resume: bool = False
    """Poison records: the pipeline is to be resumed (past them, after an acknowledgement)."""
    error: Mapping[str, Any] | None = None
    """The replay's own error, when it stopped on one."""
    ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"], data["action"] = str(self.kind), str(self.action)
        return data

    def summary(self) -> str:
        who = self.user or ("the timeout's default" if self.timed_out else "an unnamed user")
        text = f"{self.action} chosen by {who} for {self.records} {self.kind} record(s): "
        text += (
            f"replayed {self.replayed}, failed again {self.failed_again}, skipped {self.skipped}, "
            f"left {self.left}"
        )
        if self.resume:
            text += "; the pipeline resumes"
        if self.reason:
            text += f"; reason: {self.reason}"
        return text


# what the form shows -------------------------------------------------------------------------------
def _cell(value: Any, limit: int = 160) -> str:
    """A markdown table cell: one line, pipes escaped, shortened."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def _payload(record: Mapping[str, Any] | None) -> Any:
    if not record:
        return "(unreadable)"
    return (record.get("payload") or {}).get("after")


def review_body(
    pipeline_id: str, records: Sequence[ReviewRecord], *, kind: ReviewKind, sample_size: int, intro: str = ""
) -> str:
    """The form's markdown: the count, the errors by failing node, a sample table, what each option does."""
    count = len(records)
    if kind is ReviewKind.DLQ:
        head = f"**{count}** record(s) of pipeline `{pipeline_id}` reached its dead-letter queue."
        replay = (
            "**replay**: send them through the pipeline's processors and destinations as its file "
            "defines them now, one record per micro-batch (`airflow-conduit replay`)"
        )
        acknowledge = "**acknowledge**: skip them for good (never written, never replayed); give a reason"
    else:
        head = f"Pipeline `{pipeline_id}` is **degraded**: it stopped on **{count}** poison record(s)."
        replay = (
            "**replay**: resume the pipeline as it is now (its file or code was fixed): they are read again"
        )
        acknowledge = "**acknowledge**: skip them (`airflow-conduit ack`) and resume the pipeline past them; give a reason"
    lines = [head]
    if intro:
        lines += ["", intro]
    by_error = Counter((r.node or "?", _first_line(r.error)) for r in records)
    if by_error:
        lines += ["", "| records | failed at node | error |", "|---:|---|---|"]
        for (node, first_line), n in by_error.most_common():
            lines.append(f"| {n} | {_cell(node)} | {_cell(first_line)} |")
    sample = records[:sample_size]
    if sample:
        lines += [
            "",
            f"Sample ({len(sample)} of {count}):",
            "",
            "| position | node | error | record |",
            "|---|---|---|---|",
        ]
        for r in sample:
            lines.append(
                f"| {_cell(r.position)} | {_cell(r.node or '')} | {_cell(r.error or '')} | {_cell(_payload(r.record))} |"
            )
    lines += ["", f"- {replay}", f"- {acknowledge}", "- **leave**: do nothing now"]
    return "\n".join(lines)


# what the answers do -------------------------------------------------------------------------------
def acknowledge(
    state: PipelineState, records: Iterable[ReviewRecord], *, kind: ReviewKind, reason: str, user: str
) -> int:
    """Acknowledge the records (one ``acked.jsonl`` line and ``acked`` audit event each, naming the DLQ
    entry for DLQ records so that no replay sends it); returns how many were acknowledged now (an entry
    acknowledged before is not acknowledged twice)."""
    records = list(records)
    done: set[str] = set()
    if kind is ReviewKind.DLQ:
        named = {a.get("dlq_entry") for a in state.read_acked()}
        done = {r.id for r in records if r.id in named}
    count = 0
    for r in records:
        if r.id in done or r.position_bytes is None:
            continue
        state.ack(
            r.position_bytes,
            source=r.source,
            reason=reason,
            user=user,
            dlq_entry=r.id if kind is ReviewKind.DLQ else None,
        )
        count += 1
    return count


def replay_command(pipeline_file: str, state: PipelineState, ids: Iterable[str], *, master: str) -> list[str]:
    """``airflow-conduit replay FILE --pipeline ID --state-dir DIR --master M --entry FILE:LINE ...``, with
    the console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "airflow-conduit"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "airflow_conduit.cli"]
    argv = [
        *head,
        "replay",
        pipeline_file,
        "--pipeline",
        state.pipeline_id,
        "--state-dir",
        str(state.state_dir),
        "--master",
        master,
    ]
    for entry in ids:
        argv += ["--entry", entry]
    return argv


def run_replay(
    argv: list[str], *, env: Mapping[str, str], cwd: str | None
) -> tuple[int, str, dict[str, Any]]:
    """Run the CLI (``replay`` or ``inspect``); returns its exit code, its output (both streams) and its
    JSON result: the whole of stdout (``inspect --json`` prints indented JSON), else its last JSON line
    (``replay``'s summary)."""
    proc = subprocess.run(  # noqa: S603 - our own CLI
        argv, env=dict(env), cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    summary: dict[str, Any] = {}
    try:
        whole = json.loads(proc.stdout)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return proc.returncode, proc.stdout + proc.stderr, whole
    for line in reversed(proc.stdout.splitlines()):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            summary = parsed
            break
    return proc.returncode, proc.stdout + proc.stderr, summary


def event_entries(extras: Iterable[Mapping[str, Any]]) -> list[DLQEntry]:
    """The DLQ entries of some DLQ asset events' extras, each once, in order: a write announced twice
    (a triggerer killed between storing its event and recording it in the ledger) names the same entries."""
    entries: dict[str, DLQEntry] = {}
    for extra in extras:
        for entry in dlq_tools.read_dlq_event(extra):
            entries.setdefault(entry_id(entry), entry)
    return list(entries.values())


def resolved_entries(state: PipelineState, entries: Iterable[DLQEntry]) -> set[str]:
    """The ids of the ``entries`` nobody needs to review again: acknowledged as DLQ entries, or replayed
    successfully. One that failed again, or whose replay is still queued, is not resolved."""
    entries = list(entries)
    succeeded = replay_status(ReplayPaths(state)).succeeded
    return dlq_tools.acknowledged(state, entries) | ({entry_id(e) for e in entries} & succeeded)


def replay_outcome(state: PipelineState, ids: Iterable[str]) -> tuple[int, int, int]:
    """``(replayed, failed_again, pending)`` among the DLQ entries ``ids``, from the replay's bookkeeping."""
    status = replay_status(ReplayPaths(state))
    wanted = set(ids)
    succeeded, failed = wanted & status.succeeded, wanted & status.failed
    return len(succeeded), len(failed), len(wanted - succeeded - failed)


def audit_review(state: PipelineState, outcome: ReviewOutcome, **where: Any) -> dict[str, Any]:
    """The ``dlq_reviewed`` audit event: the answer, who gave it and why, and its outcome."""
    data = outcome.to_dict()
    data.pop("ids")
    return state.audit(REVIEWED_EVENT, **data, **where)


# poison records of a degraded pipeline ---------------------------------------------------------------
_THRESHOLD_POSITION = re.compile(r"at record position (?P<position>.*?), original error: (?P<error>.*)", re.S)


def degraded_payload(state: PipelineState) -> ExitPayload | None:
    """The exit payload when the pipeline's last run left it degraded (fatal), else ``None``."""
    payload = state.read_exit()
    if payload is None or payload.status != Status.DEGRADED or payload.error is None:
        return None
    return payload


def threshold_record(payload: ExitPayload) -> ReviewRecord | None:
    """The record that crossed the DLQ nack threshold, named by the engine's message; ``None`` for
    other errors."""
    error = payload.error
    if error is None or error.code != Code.DLQ_THRESHOLD_EXCEEDED:
        return None
    found = _THRESHOLD_POSITION.search(error.message)
    if found is None:
        return None
    position = found["position"]
    return ReviewRecord(
        id=position,
        position=position,
        node=error.node,
        error=found["error"],
        record=None,
        position_bytes=position.encode(),
    )


def with_inspected_record(found: ReviewRecord, inspected: list[ReviewRecord]) -> ReviewRecord:
    """The threshold record ``found`` with its content and exact position bytes from the records of the
    stopped batch (``inspected``), when that batch holds it; else ``found`` as it is."""
    same = next((r for r in inspected if r.position == found.position), None)
    if same is None:
        return found
    return replace(found, record=same.record, position_bytes=same.position_bytes, source=same.source)


def stopped_batch(state: PipelineState) -> int | None:
    """The micro-batch the pipeline stopped on: the last one of the offset log, when not committed."""
    log = OffsetLog.of(state)
    ids = log.batch_ids()
    if not ids or log.is_committed(ids[-1]):
        return None
    return ids[-1]


def inspect_command(pipeline_file: str, state: PipelineState, batch: int) -> list[str]:
    script = Path(sys.executable).parent / "airflow-conduit"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "airflow_conduit.cli"]
    return [
        *head,
        "inspect",
        pipeline_file,
        "--pipeline",
        state.pipeline_id,
        "--state-dir",
        str(state.state_dir),
        "--batch",
        str(batch),
        "--json",
        "--limit",
        "0",
    ]


def inspected_records(inspected: Mapping[str, Any], error: Mapping[str, Any] | None) -> list[ReviewRecord]:
    """The not yet acknowledged records of ``airflow-conduit inspect --json`` output, each with the error
    that stopped the pipeline (the engine names the node, not the record, for a fatal processor error)."""
    records = []
    for batch in inspected.get("batches") or []:
        for item in batch.get("records") or []:
            if item.get("acked"):
                continue
            record = item.get("record") or {}
            text = item.get("position_text") or ""
            records.append(
                ReviewRecord(
                    id=text,
                    position=text,
                    node=(error or {}).get("node"),
                    error=(error or {}).get("message"),
                    record=record,
                    position_bytes=dlq_tools.DLQEntry("", 0, record).position_bytes,
                    source=item.get("source"),
                )
            )
    return records
