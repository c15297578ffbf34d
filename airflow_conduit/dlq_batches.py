"""The DLQ store as a sequence of committed writes, and the ledger of which of them were announced.

The engine writes a micro-batch's DLQ records to ``STATE_DIR/PIPELINE_ID/dlq/`` as files named
``GENERATION-BATCH-PART.jsonl`` (:mod:`airflow_conduit.engine.connectors.jsonl_files`): the parts appear
one by one under their final names, and only then is the writer's marker ``.delivery-*.json`` replaced
with that batch's delivery. So a batch is complete exactly when its prefix sorts at or before the one the
marker names; parts of a later batch may already be visible, and are left for the next look.

The ledger, ``STATE_DIR/PIPELINE_ID/dlq_published.json`` (``{"files": {name: lines}}``), is the one
record of what was announced as DLQ asset events, shared by the live watcher
(:mod:`airflow_conduit.triggers.dlq_watch`) and the operator's end-of-task event, so neither announces a
line the other did. Updates go through an exclusive ``flock`` so the two never lose each other's writes.
Pure Python: the triggerer, the operator and tests read it without Spark.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_conduit import dlq_tools
from airflow_conduit.record import position_text
from airflow_conduit.state import PipelineState, read_json, write_json_atomic

PUBLISHED_FILE = "dlq_published.json"
"""``STATE_DIR/PIPELINE_ID/dlq_published.json``: DLQ line counts already announced in asset events."""
OFFERED_FILE = "dlq_offered.json"
"""``STATE_DIR/PIPELINE_ID/dlq_offered.json``: DLQ writes the watcher offered as events and has not yet
heard were stored (``{"writes": {prefix: offered_at}}``); a restarted watcher settles them first."""
WATCH_FILE = "dlq_watch.json"
"""``STATE_DIR/PIPELINE_ID/dlq_watch.json``: when a live watcher last looked; the operator leaves the
announcing to a watcher seen recently."""
MAX_LISTED_POSITIONS = 20
"""An event lists every position of a write up to this many records, else the first and last."""


@dataclass(frozen=True)
class DLQWrite:
    """One committed DLQ write: the files one micro-batch added to the DLQ store, with their line ranges."""

    prefix: str
    """``GENERATION-BATCH``: names the write, unique in the store, sorts in delivery order."""
    files: dict[str, list[int]] = field(default_factory=dict)
    """``{file: [start, end]}``, end exclusive, as :func:`airflow_conduit.dlq_tools.read_dlq` takes them."""

    @property
    def batch(self) -> int:
        return int(self.prefix.rsplit("-", 1)[1])


def write_prefix(file_name: str) -> str:
    """``GENERATION-BATCH`` of a DLQ file ``GENERATION-BATCH-PART.jsonl``."""
    return file_name.rsplit("-", 1)[0]


def committed_prefix(dlq_dir: Path) -> str | None:
    """The prefix of the last DLQ write whose parts are all in place (named by the writer's marker)."""
    last: str | None = None
    for marker in dlq_dir.glob(".delivery-*.json"):
        delivery = read_json(marker) or {}
        try:
            prefix = f"{delivery['generation']}-{int(delivery['batch']):012d}"
        except (KeyError, TypeError, ValueError):
            continue
        last = prefix if last is None or prefix > last else last
    return last


def committed_writes(dlq_dir: Path, announced: Mapping[str, int]) -> list[DLQWrite]:
    """The complete DLQ writes of ``dlq_dir`` with lines beyond ``announced`` (a ledger), oldest first.

    The marker is read before the files are listed: every part of the write it names is in place by
    then, and a write that finishes in between sorts after it and waits for the next call.
    """
    last = committed_prefix(dlq_dir)
    if last is None:
        return []
    writes: dict[str, DLQWrite] = {}
    for name, count in dlq_tools.snapshot(dlq_dir).items():
        prefix = write_prefix(name)
        start = announced.get(name, 0)
        if prefix > last or count <= start:
            continue
        writes.setdefault(prefix, DLQWrite(prefix)).files[name] = [start, count]
    return [writes[prefix] for prefix in sorted(writes)]


def describe(pipeline_id: str, dlq_dir: Path, write: DLQWrite) -> dict[str, Any]:
    """An asset event's extra for ``write``: what :func:`airflow_conduit.dlq_tools.read_dlq_event` reads back
    (``path``, ``files``) and a summary (``records``, positions, ``error_codes``, ``nodes``)."""
    entries = dlq_tools.read_dlq(dlq_dir, ranges=write.files)
    extra: dict[str, Any] = {
        "pipeline_id": pipeline_id,
        "path": str(dlq_dir),
        "files": write.files,
        "write": write.prefix,
        "batch": write.batch,
        **dlq_tools.summarize(entries),
    }
    if len(entries) <= MAX_LISTED_POSITIONS:
        extra["positions"] = [position_text(e.position) for e in entries]
    return extra


# the ledger ------------------------------------------------------------------------------------------
@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".dlq_published.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_announced(state: PipelineState) -> dict[str, int]:
    """The ledger: ``{DLQ file: lines announced}``."""
    files = (read_json(state.root / PUBLISHED_FILE) or {}).get("files") or {}
    return {str(name): int(count) for name, count in files.items()}


def read_offered(state: PipelineState) -> dict[str, datetime]:
    """The writes offered and not yet settled: ``{prefix: when offered}``."""
    writes = (read_json(state.root / OFFERED_FILE) or {}).get("writes") or {}
    return {str(prefix): datetime.fromisoformat(at) for prefix, at in writes.items()}


def mark_offered(state: PipelineState, prefix: str, now: datetime | None = None) -> None:
    """Record that write ``prefix`` is about to be offered as an event (before the offer: a triggerer
    that dies after it leaves the record for the next one to settle)."""
    with _locked(state.root):
        _write_offered(state, {**read_offered(state), prefix: now or datetime.now(UTC)})


def settle_offered(
    state: PipelineState, prefixes: Iterable[str], announced: Mapping[str, list[int]] | None = None
) -> None:
    """Forget the offers of ``prefixes``; with ``announced`` (``{file: [start, end]}``) also record those
    lines in the ledger, under the same lock."""
    with _locked(state.root):
        if announced:
            ledger = read_announced(state)
            for name, (_, end) in announced.items():
                ledger[name] = max(ledger.get(name, 0), int(end))
            write_json_atomic(state.root / PUBLISHED_FILE, {"files": ledger})
        settled = set(prefixes)
        _write_offered(state, {p: at for p, at in read_offered(state).items() if p not in settled})


def _write_offered(state: PipelineState, offers: Mapping[str, datetime]) -> None:
    """Replace ``dlq_offered.json`` (the caller holds the lock)."""
    writes = {prefix: at.isoformat() for prefix, at in offers.items()}
    write_json_atomic(state.root / OFFERED_FILE, {"writes": writes})


@contextmanager
def announcing(state: PipelineState) -> Iterator[dict[str, int]]:
    """Hold the ledger's lock while deciding and recording an announcement; yields the ledger to extend
    in place, written back on exit."""
    with _locked(state.root):
        ledger = read_announced(state)
        yield ledger
        write_json_atomic(state.root / PUBLISHED_FILE, {"files": ledger})


def note_watching(state: PipelineState, now: datetime | None = None) -> None:
    """Tell the operator that a live watcher follows this DLQ (see :func:`watched`)."""
    moment = (now or datetime.now(UTC)).isoformat()
    write_json_atomic(state.root / WATCH_FILE, {"seen_at": moment, "pid": os.getpid()})


def watched(state: PipelineState, *, within: float = 60.0, now: datetime | None = None) -> bool:
    """Whether a live watcher looked at this DLQ within ``within`` seconds."""
    try:
        data = json.loads((state.root / WATCH_FILE).read_text(encoding="utf-8"))
        seen = datetime.fromisoformat(data["seen_at"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return False
    return ((now or datetime.now(UTC)) - seen).total_seconds() <= within
