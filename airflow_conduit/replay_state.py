"""Where a pipeline's DLQ replays stand, read from its state dir (pure Python: no Spark, no Airflow).

``airflow-conduit replay`` (:mod:`airflow_conduit.engine.replay`) keeps everything under
``STATE/PIPELINE/replay/``::

    inbox/            replay files, written atomically; the replay source reads them in name order
    PIPELINE/         the replay's own state dir: checkpoint, DLQ (records that failed again), audit log
    replayed.jsonl    the DLQ entries replayed successfully: a later replay skips them

The engine's replay and the UI's DLQ browser both read it through this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from airflow_conduit.dlq_tools import REPLAY_ENTRY, read_dlq
from airflow_conduit.offsets import OffsetLog
from airflow_conduit.record import position_text
from airflow_conduit.state import PipelineState


@dataclass(frozen=True)
class ReplayLine:
    file: str
    offset: int
    entry: str
    """The DLQ entry it replays, ``FILE:LINE``."""

    @property
    def position(self) -> str:
        """The replay source's position of this line, as text."""
        return f"{self.file}:{self.offset}"


@dataclass(frozen=True)
class ReplayPaths:
    state: PipelineState
    """The pipeline's own state."""

    @property
    def root(self) -> Path:
        return self.state.root / "replay"

    @property
    def inbox(self) -> Path:
        return self.root / "inbox"

    @property
    def replay_state(self) -> PipelineState:
        return PipelineState(self.root, self.state.pipeline_id)

    @property
    def replayed_file(self) -> Path:
        return self.root / "replayed.jsonl"


def queued_lines(inbox: Path) -> list[ReplayLine]:
    """Every line of the replay files, in the order the replay source reads them."""
    if not inbox.is_dir():
        return []
    lines = []
    for path in sorted(p for p in inbox.iterdir() if p.is_file() and not p.name.startswith(("_", "."))):
        offset = 0
        for raw in path.read_bytes().splitlines(keepends=True):
            try:
                metadata = json.loads(raw).get("metadata") or {}
            except ValueError:
                metadata = {}
            if REPLAY_ENTRY in metadata:
                lines.append(ReplayLine(path.name, offset, metadata[REPLAY_ENTRY]))
            offset += len(raw)
    return lines


def processed_ends(replay_state: PipelineState) -> dict[str, int]:
    """Per replay file, the byte offset up to which the replay committed (acked every record)."""
    log = OffsetLog.of(replay_state)
    last = log.last_committed()
    if last is None:
        return {}
    ends = log.read(last).ends
    return dict((ends[0] or {}).get("files") or {}) if ends else {}


def read_replayed(path: Path) -> set[str]:
    """The DLQ entries (``FILE:LINE``) replayed successfully."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return set()
    done = set()
    for line in lines:
        try:
            done.add(json.loads(line)["entry"])
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line
    return done


@dataclass(frozen=True)
class ReplayStatus:
    """Where every DLQ entry that was ever queued stands."""

    succeeded: frozenset[str]
    failed: frozenset[str]
    pending: frozenset[str]
    processed_lines: frozenset[str]
    """Positions (text) of replay lines the replay committed."""


def replay_status(paths: ReplayPaths) -> ReplayStatus:
    ends = processed_ends(paths.replay_state)
    failed_positions = {position_text(e.position) for e in read_dlq(paths.replay_state.dlq_dir)}
    latest: dict[str, ReplayLine] = {}
    processed = set()
    for line in queued_lines(paths.inbox):
        latest[line.entry] = line  # a re-queued entry: its last line decides
        if line.offset < ends.get(line.file, 0):
            processed.add(line.position)
    succeeded, failed, pending = set(read_replayed(paths.replayed_file)), set(), set()
    for entry, line in latest.items():
        if entry in succeeded:
            continue
        if line.position not in processed:
            pending.add(entry)
        elif line.position in failed_positions:
            failed.add(entry)
        else:
            succeeded.add(entry)
    return ReplayStatus(frozenset(succeeded), frozenset(failed), frozenset(pending), frozenset(processed))
