"""Read a pipeline's dead-letter queue back, summarise it, and replay fixed records (pure Python).

The engine stores every DLQ record in ``STATE_DIR/PIPELINE_ID/dlq/*.jsonl`` as an OpenCDC JSON line:
``{"position", "operation": "create", "metadata": {"conduit.dlq.nack.error": ..., "conduit.dlq.nack.node.id":
...}, "key", "payload": {"before": null, "after": <the failed record>}}``. Files whose names start with
``_`` or ``.`` are in progress or bookkeeping and are skipped.

A replay writes fixed records as OpenCDC JSON lines into a directory that a replay pipeline reads with
a ``builtin:file`` source; its ``custom.python`` processor :func:`unwrap_opencdc` turns each line back
into the record (Conduit's ``unwrap.opencdc``).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_conduit.files import write_atomic
from airflow_conduit.state import PipelineState

NACK_ERROR = "conduit.dlq.nack.error"
NACK_NODE = "conduit.dlq.nack.node.id"
NACK_CODE = "conduit.dlq.nack.error.code"
ORIGINAL_POSITION = "conduit.dlq.original.position"
REPLAY_OF = "conduit.replay.of"

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
        code = entry.error_code or _short(entry.error)
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


def position_text(position: str | None) -> str | None:
    """A stored (base64) position as text, as the exit payload and ``airflow-conduit dlq`` show it;
    unchanged when it is not base64 of UTF-8 text."""
    if position is None:
        return None
    try:
        return base64.b64decode(position, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return position


def _short(message: str | None, limit: int = 120) -> str | None:
    if not message:
        return None
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def read_dlq_event(extra: Mapping[str, Any]) -> list[DLQEntry]:
    """The records a DLQ asset event describes (its ``path`` and ``files`` extra)."""
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


def replay(
    entries: Iterable[DLQEntry],
    directory: str | os.PathLike[str],
    *,
    fix: Callable[[dict[str, Any]], Mapping[str, Any] | None] | None = None,
    name: str | None = None,
) -> tuple[Path | None, int, int]:
    """Fix DLQ records and write them for a replay pipeline.

    Each failed record gets ``conduit.dlq.original.position`` in its metadata. ``fix`` receives the
    failed record as a plain dict and returns the fixed one, or ``None`` to drop it.

    Returns ``(file, replayed, dropped)``.
    """
    out, dropped = [], 0
    for entry in entries:
        record = entry.record
        if record is None:
            dropped += 1
            continue
        fixed = fix(record) if fix is not None else record
        if fixed is None:
            dropped += 1
            continue
        fixed = dict(fixed)
        metadata = dict(fixed.get("metadata") or {})
        if entry.position is not None:
            metadata.setdefault(ORIGINAL_POSITION, entry.position)
        fixed["metadata"] = metadata
        out.append(fixed)
    return write_replay(out, directory, name=name), len(out), dropped


def unwrap_opencdc(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """``custom.python`` processor: a line written by :func:`replay` back into the record it holds.

    The line arrives as the raw ``payload.after`` of a ``builtin:file`` source record; the result keeps
    the source's position (so acks go to the replay file) and the replayed record's operation, key,
    metadata and payload.
    """
    after = (record.get("payload") or {}).get("after")
    if isinstance(after, bytes | bytearray):
        after = bytes(after).decode("utf-8")
    inner = json.loads(after) if isinstance(after, str) else after
    if not isinstance(inner, Mapping):
        raise ValueError("replay line is not an OpenCDC record")
    metadata = {**dict(record.get("metadata") or {}), **dict(inner.get("metadata") or {})}
    metadata[REPLAY_OF] = str(inner.get("position") or metadata.get(ORIGINAL_POSITION) or "")
    payload = inner.get("payload") or {}
    return {
        "position": record.get("position"),
        "operation": inner.get("operation") or "create",
        "metadata": {k: str(v) for k, v in metadata.items()},
        "key": inner.get("key"),
        "payload": {"before": payload.get("before"), "after": payload.get("after")},
    }
