"""The DLQ as the UI browses it: filter by error code and time, page, look one entry up, and each entry's
state (pure Python: no Airflow, no FastAPI, no Spark).

Entries come from :func:`airflow_conduit.dlq_tools.read_dlq` (the queryable DLQ store of the state dir)
and are identified by :func:`~airflow_conduit.dlq_tools.entry_id` (``FILE:LINE``), as the replay knows
them. An entry is

- ``replayed`` once a replay delivered it (:func:`airflow_conduit.replay_state.replay_status`:
  ``replay/replayed.jsonl`` and the replay's checkpoint);
- ``acknowledged`` when it was acknowledged as a DLQ entry (``acked.jsonl`` lines naming it) and it was
  not replayed before: a replay skips it;
- ``pending`` otherwise (never replayed, queued, or failed again in a replay).

An entry's time is when its source read the failed record (``opencdc.readAt``), else its DLQ file's
modification time. Its code is the ``conduit.dlq.nack.error.code`` metadata, else the error message's first
line, as :func:`~airflow_conduit.dlq_tools.summarize` names codes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from airflow_conduit import dlq_tools
from airflow_conduit.dlq_tools import DLQEntry, entry_id
from airflow_conduit.record import position_text
from airflow_conduit.replay_state import ReplayPaths, replay_status
from airflow_conduit.state import PipelineState, format_time

EntryState = Literal["pending", "replayed", "acknowledged"]
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Row:
    """One DLQ entry as the browser's table lists it."""

    id: str
    time: str | None
    position: str | None
    """The failed record's position, as text."""
    code: str | None
    message: str | None
    node: str | None
    state: EntryState
    moment: datetime | None
    """``time`` as a datetime, for filtering."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time,
            "position": self.position,
            "code": self.code,
            "message": self.message,
            "node": self.node,
            "state": self.state,
        }


@dataclass(frozen=True)
class Page:
    total: int
    """Entries that pass the filter (all pages)."""
    offset: int
    limit: int
    codes: list[tuple[str, int]]
    """Every code of the DLQ with its count (unfiltered: the filter's choices), most frequent first."""
    rows: list[Row]

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "codes": [{"code": code, "count": count} for code, count in self.codes],
            "entries": [row.to_dict() for row in self.rows],
        }


def states(state: PipelineState, entries: list[DLQEntry]) -> dict[str, EntryState]:
    """Every entry's state, by entry id."""
    replayed = replay_status(ReplayPaths(state)).succeeded
    acked = dlq_tools.acknowledged(state, entries)
    out: dict[str, EntryState] = {}
    for entry in entries:
        key = entry_id(entry)
        out[key] = "replayed" if key in replayed else "acknowledged" if key in acked else "pending"
    return out


def _moments(state: PipelineState, entries: list[DLQEntry]) -> list[datetime | None]:
    mtimes: dict[str, datetime | None] = {}
    moments = []
    for entry in entries:
        moment = entry.read_at
        if moment is None:
            if entry.file not in mtimes:
                try:
                    stat = (state.dlq_dir / entry.file).stat()
                    mtimes[entry.file] = datetime.fromtimestamp(stat.st_mtime, UTC)
                except OSError:
                    mtimes[entry.file] = None
            moment = mtimes[entry.file]
        moments.append(moment)
    return moments


def rows(state: PipelineState) -> list[Row]:
    """Every DLQ entry of the pipeline, newest first."""
    entries = dlq_tools.read_dlq(state.dlq_dir)
    by_id = states(state, entries)
    out = [
        Row(
            id=entry_id(entry),
            time=format_time(moment) if moment is not None else None,
            position=position_text(entry.position),
            code=dlq_tools.entry_code(entry),
            message=entry.error,
            node=entry.node,
            state=by_id[entry_id(entry)],
            moment=moment,
        )
        for entry, moment in zip(entries, _moments(state, entries), strict=True)
    ]
    out.reverse()  # the store is in delivery order
    return out


def browse(
    state: PipelineState,
    *,
    code: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    offset: int = 0,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """One page of the DLQ, newest first.

    :param code: only entries with this code (``None`` or ``""``: all)
    :param since: only entries at or after this moment (aware)
    :param until: only entries before this moment (aware); an entry without a time passes no time filter
    :param offset: entries to skip (of the filtered ones)
    :param limit: page size, 1 to :data:`MAX_LIMIT`
    """
    offset, limit = max(0, offset), min(max(1, limit), MAX_LIMIT)
    every = rows(state)
    counts = Counter(row.code for row in every if row.code)
    kept = [
        row
        for row in every
        if (not code or row.code == code)
        and (since is None or (row.moment is not None and row.moment >= since))
        and (until is None or (row.moment is not None and row.moment < until))
    ]
    return Page(
        total=len(kept),
        offset=offset,
        limit=limit,
        codes=sorted(counts.items(), key=lambda item: (-item[1], item[0])),
        rows=kept[offset : offset + limit],
    )


def lookup(state: PipelineState, wanted: str) -> dict[str, Any] | None:
    """The whole entry ``wanted`` (an entry id): the failed record, its error, the DLQ record's metadata,
    its state; ``None`` when the DLQ has no such entry."""
    file, _, line = wanted.rpartition(":")
    if not file or not line.isdigit():
        return None
    entries = dlq_tools.read_dlq(state.dlq_dir)
    found = next((e for e in entries if e.file == file and e.line == int(line)), None)
    if found is None:
        return None
    moment = _moments(state, [found])[0]
    return {
        "id": wanted,
        "time": format_time(moment) if moment is not None else None,
        "position": position_text(found.position),
        "code": dlq_tools.entry_code(found),
        "error": found.error,
        "node": found.node,
        "source": dlq_tools.source_id(found, state.pipeline_id),
        "metadata": dict(found.metadata),
        "record": found.record,
        "state": states(state, entries)[wanted],
    }


def find(state: PipelineState, ids: list[str]) -> tuple[list[DLQEntry], list[str]]:
    """The entries of ``ids`` (in the DLQ's order) and the ids the DLQ does not hold."""
    wanted = set(ids)
    entries = [e for e in dlq_tools.read_dlq(state.dlq_dir) if entry_id(e) in wanted]
    found = {entry_id(e) for e in entries}
    return entries, [i for i in ids if i not in found]


def acknowledge(state: PipelineState, ids: list[str], *, reason: str, user: str) -> list[dict[str, Any]]:
    """Acknowledge the entries ``ids`` (:meth:`PipelineState.ack` of each position, for its own source,
    naming the entry): the engine skips those records if a source reads them again and a replay never
    sends those entries. Entries already acknowledged are not acknowledged twice. Returns the
    ``acked.jsonl`` lines written.

    :raises KeyError: an id the DLQ does not hold (nothing is acknowledged then)
    """
    entries, missing = find(state, ids)
    if missing:
        raise KeyError(", ".join(missing))
    done = dlq_tools.acknowledged(state, entries)
    written = []
    for entry in entries:
        position, source = entry.position_bytes, dlq_tools.source_id(entry, state.pipeline_id)
        if entry_id(entry) in done or position is None:
            continue
        written.append(
            state.ack(position, source=source, reason=reason, user=user, dlq_entry=entry_id(entry))
        )
    return written
