"""Read a pipeline's dead-letter queue back, summarise it, and replay fixed records (pure Python).

The engine stores every DLQ record in ``STATE_DIR/PIPELINE_ID/dlq/*.jsonl`` as an OpenCDC JSON line:
``{"position", "operation": "create", "metadata": {"conduit.dlq.nack.error": ..., "conduit.dlq.nack.node.id":
...}, "key", "payload": {"before": null, "after": <the failed record>}}``. Files whose names start with
``_`` or ``.`` are in progress or bookkeeping and are skipped.

A replay writes DLQ records (fixed, or as they are) as lines of a file that a replay pipeline reads
with a ``builtin:file`` source; its first processor, ``custom.python`` :func:`unwrap_dlq_record`, turns
each line back into the failed record (Conduit's ``unwrap.opencdc``). ``airflow-conduit replay``
(:mod:`airflow_conduit.engine.replay`) and a DAG's own review task (:func:`replay`) write the same lines.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_conduit.files import write_atomic
from airflow_conduit.record import META_READ_AT, META_SOURCE_CONNECTOR, position_text
from airflow_conduit.state import PipelineState

NACK_ERROR = "conduit.dlq.nack.error"
NACK_NODE = "conduit.dlq.nack.node.id"
NACK_CODE = "conduit.dlq.nack.error.code"
REPLAY_OF = "conduit.replay.of"
"""Metadata of a replayed record: the position (text) it had when it failed."""
REPLAY_ENTRY = "conduit.replay.entry"
"""Metadata of a replay line: the DLQ entry (``FILE:LINE``) it replays."""

Snapshot = dict[str, int]
"""Line counts per DLQ file name, taken before a run; what a run added is what lies beyond them."""


@dataclass(frozen=True)
class DLQEntry:
    """One record of the DLQ."""

    file: str
    line: int
    """0-based line number in ``file``."""
    dlq_record: Mapping[str, Any]
    """The DLQ record as stored (OpenCDC, with the failed record in ``payload.after``)."""

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.dlq_record.get("metadata") or {}

    @property
    def error(self) -> str | None:
        return self.metadata.get(NACK_ERROR)

    @property
    def node(self) -> str | None:
        return self.metadata.get(NACK_NODE)

    @property
    def error_code(self) -> str | None:
        return self.metadata.get(NACK_CODE)

    @property
    def position(self) -> str | None:
        """The DLQ record's position (base64, as stored): the failed record's position."""
        position = self.dlq_record.get("position")
        if position is None:
            position = (self.record or {}).get("position")
        return position

    @property
    def position_bytes(self) -> bytes | None:
        """The failed record's position as the engine and ``acked.jsonl`` hold it (the stored base64
        decoded; a position stored as plain text, as its UTF-8 bytes)."""
        position = self.position
        if position is None:
            return None
        try:
            return base64.b64decode(position, validate=True)
        except (binascii.Error, ValueError):
            return str(position).encode()

    @property
    def source_node(self) -> str | None:
        """The node id (``pipeline:source``) of the source that read the failed record."""
        return self.metadata.get(META_SOURCE_CONNECTOR) or None

    @property
    def read_at(self) -> datetime | None:
        """When the source read the failed record (OpenCDC's ``opencdc.readAt``, nanoseconds)."""
        try:
            return datetime.fromtimestamp(int(self.metadata[META_READ_AT]) / 1e9, UTC)
        except (KeyError, TypeError, ValueError, OverflowError):
            return None

    @property
    def record(self) -> dict[str, Any] | None:
        """The failed record: ``{position, operation, metadata, key, payload: {before, after}}``."""
        after = (self.dlq_record.get("payload") or {}).get("after")
        if isinstance(after, Mapping):
            return dict(after)
        if isinstance(after, str):  # stored raw: a JSON text
            try:
                parsed = json.loads(after)
            except ValueError:
                return None
            return parsed if isinstance(parsed, dict) else None
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "position": self.position,
            "error": self.error,
            "error_code": self.error_code,
            "node": self.node,
            "record": self.record,
        }


def dlq_dir(state_dir: str | os.PathLike[str], pipeline_id: str) -> Path:
    return PipelineState.of(state_dir, pipeline_id).dlq_dir


def dlq_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The complete DLQ files of ``directory`` in delivery order (their names sort in that order)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_file() and p.suffix == ".jsonl" and not p.name.startswith(("_", "."))
    )


def _lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def snapshot(directory: str | os.PathLike[str]) -> Snapshot:
    """Line counts of the DLQ files now; pass it to :func:`read_dlq` to get only what came later."""
    return {p.name: len(_lines(p)) for p in dlq_files(directory)}


def read_dlq(
    directory: str | os.PathLike[str],
    *,
    since: Mapping[str, int] | None = None,
    ranges: Mapping[str, Iterable[int]] | None = None,
) -> list[DLQEntry]:
    """The DLQ records of ``directory`` in delivery order.

    :param directory: the DLQ dir (``STATE_DIR/PIPELINE_ID/dlq``), see :func:`dlq_dir`
    :param since: a :func:`snapshot`: only records added after it
    :param ranges: ``{file: [start, end]}`` line ranges (end exclusive), as in a DLQ asset event's
        ``files`` extra: only those records
    """
    entries: list[DLQEntry] = []
    for path in dlq_files(directory):
        start, end = 0, None
        if ranges is not None:
            if path.name not in ranges:
                continue
            start, end = list(ranges[path.name])[:2]
        elif since is not None:
            start = since.get(path.name, 0)
        for number, line in enumerate(_lines(path)):
            if number < start or (end is not None and number >= end) or not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn line after a crash
            if isinstance(record, dict):
                entries.append(DLQEntry(file=path.name, line=number, dlq_record=record))
    return entries


def added_ranges(directory: str | os.PathLike[str], since: Mapping[str, int]) -> dict[str, list[int]]:
    """``{file: [start, end]}`` of the lines added to each DLQ file after the snapshot ``since``."""
    ranges = {}
    for name, count in snapshot(directory).items():
        start = since.get(name, 0)
        if count > start:
            ranges[name] = [start, count]
    return ranges


def summarize(entries: Iterable[DLQEntry], *, max_codes: int = 20) -> dict[str, Any]:
    """``records``, ``first_position``, ``last_position``, ``error_codes`` and ``nodes`` of some entries.

    ``error_codes`` holds the ``conduit.dlq.nack.error.code`` metadata where the engine writes it, else
    the error messages (first line, shortened); both de-duplicated in order of appearance.
    """
    entries = list(entries)
    codes: list[str] = []
    nodes: list[str] = []
    for entry in entries:
        code = entry_code(entry)
        if code and code not in codes and len(codes) < max_codes:
            codes.append(code)
        if entry.node and entry.node not in nodes:
            nodes.append(entry.node)
    return {
        "records": len(entries),
        "first_position": position_text(entries[0].position) if entries else None,
        "last_position": position_text(entries[-1].position) if entries else None,
        "error_codes": codes,
        "nodes": nodes,
    }


def entry_code(entry: DLQEntry) -> str | None:
    """The entry's error code: the ``conduit.dlq.nack.error.code`` metadata where the engine writes it,
    else the error message's first line, shortened."""
    return entry.error_code or _short(entry.error)


def _short(message: str | None, limit: int = 120) -> str | None:
    if not message:
        return None
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def read_dlq_event(extra: Mapping[str, Any]) -> list[DLQEntry]:
    """The records a DLQ asset event describes (its ``path`` and ``files`` extra).

    An event from the live watcher (``dlq_asset(..., watch=True)``) holds them under ``payload``, as
    Airflow stores a trigger's event: ``{"from_trigger": true, "payload": {...}}``; both are read.
    """
    if "path" not in extra and isinstance(extra.get("payload"), Mapping):
        extra = extra["payload"]
    return read_dlq(extra["path"], ranges=extra.get("files") or {})


# replay ---------------------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write_replay(
    records: Iterable[Mapping[str, Any]],
    directory: str | os.PathLike[str],
    *,
    name: str | None = None,
) -> Path | None:
    """Write records as OpenCDC JSON lines to a new file in ``directory``, atomically.

    The file appears under its final name only once complete, so a ``builtin:file`` source that watches
    ``directory`` never reads half of it. Returns the file, or ``None`` when there was nothing to write.

    :param records: OpenCDC records (``{position, operation, metadata, key, payload}``)
    :param directory: where the replay pipeline's source reads
    :param name: the file name (default ``replay-<UTC timestamp>.jsonl``)
    """
    lines = [json.dumps(_jsonable(dict(r)), sort_keys=True) for r in records]
    if not lines:
        return None
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    name = name or f"replay-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}.jsonl"
    target = root / name
    write_atomic(target, "\n".join(lines) + "\n")
    return target


def entry_id(entry: DLQEntry) -> str:
    """A DLQ entry's identity across replays: ``FILE:LINE`` in the DLQ store."""
    return f"{entry.file}:{entry.line}"


def source_id(entry: DLQEntry, pipeline_id: str) -> str | None:
    """The id of the source that read the entry's failed record, as an ack names it (the record names
    it by node id, ``pipeline:source``)."""
    node = entry.source_node
    if node is None:
        return None
    prefix = f"{pipeline_id}:"
    return node[len(prefix) :] if node.startswith(prefix) else node


def acknowledged(state: PipelineState, entries: Iterable[DLQEntry]) -> set[str]:
    """The ids (:func:`entry_id`) of the ``entries`` acknowledged as DLQ entries (:meth:`PipelineState.ack`
    with ``dlq_entry``: the UI's DLQ browser): a replay never sends them.

    An ack of a poison record's position alone (``airflow-conduit ack``) does not count: it lets the
    pipeline past the record, and replaying its DLQ entry once the cause is fixed stays possible.
    """
    named = {ack["dlq_entry"] for ack in state.read_acked() if isinstance(ack.get("dlq_entry"), str)}
    return {entry_id(entry) for entry in entries} & named if named else set()


def replay_line(entry: DLQEntry, failed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The line a replay reads for ``entry``: the DLQ record as stored, tagged with its entry id
    (``conduit.replay.entry``), with ``failed`` (a fixed version of the failed record) in place of the
    stored one when given."""
    line = dict(entry.dlq_record)
    line["metadata"] = {**dict(entry.metadata), REPLAY_ENTRY: entry_id(entry)}
    if failed is not None:
        line["payload"] = {**dict(line.get("payload") or {}), "after": dict(failed)}
    return line


def replay(
    entries: Iterable[DLQEntry],
    directory: str | os.PathLike[str],
    *,
    fix: Callable[[dict[str, Any]], Mapping[str, Any] | None] | None = None,
    name: str | None = None,
) -> tuple[Path | None, int, int]:
    """Write DLQ records, fixed, as a replay file that a pipeline with a ``builtin:file`` source and the
    :func:`unwrap_dlq_record` processor first delivers again (``airflow-conduit replay`` does the same
    with the pipeline's own destinations).

    ``fix`` receives the failed record as a plain dict and returns the fixed one, or ``None`` to drop it
    (a record the DLQ holds unreadable is dropped too). Returns ``(file, replayed, dropped)``.
    """
    lines, dropped = [], 0
    for entry in entries:
        if fix is None:  # as stored: a record that cannot be unwrapped fails again, visibly
            lines.append(replay_line(entry))
            continue
        failed = entry.record
        fixed = fix(failed) if failed is not None else None
        if fixed is None:
            dropped += 1
            continue
        lines.append(replay_line(entry, fixed))
    return write_replay(lines, directory, name=name), len(lines), dropped


def _data(value: Any) -> Any:
    """OpenCDC JSON keeps raw data as base64 text and structured data as JSON values."""
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return value.encode()
    return value


def unwrap_dlq_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``custom.python`` processor (Conduit's ``unwrap.opencdc``): a replay line, the DLQ record as a
    ``builtin:file`` source reads it, back into the failed record, its ``.Payload.After``.

    The result keeps the replay source's position, which names the replay line (so a record that fails
    again is traced to its DLQ entry), and gets the original position, as text, in ``conduit.replay.of``.
    """
    line = (record.get("payload") or {}).get("after")
    if isinstance(line, bytes | bytearray):
        line = bytes(line).decode("utf-8")
    wrapper = json.loads(line) if isinstance(line, str) else line
    failed = (wrapper.get("payload") or {}).get("after") if isinstance(wrapper, Mapping) else None
    if isinstance(failed, str):  # a DLQ that stores the failed record as raw JSON text
        failed = json.loads(failed)
    if not isinstance(failed, Mapping):
        raise ValueError("replay line is not a DLQ record with the failed record in .Payload.After")
    metadata = {str(k): str(v) for k, v in (failed.get("metadata") or {}).items()}
    metadata[REPLAY_OF] = position_text(failed.get("position")) or ""
    payload = failed.get("payload") or {}
    return {
        "position": record.get("position"),
        "operation": failed.get("operation") or "create",
        "metadata": metadata,
        "key": _data(failed.get("key")),
        "payload": {"before": _data(payload.get("before")), "after": _data(payload.get("after"))},
    }
