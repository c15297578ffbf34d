"""The state dir: layout, status, audit log and exit payload (pure Python).

Written by the engine, read by the CLI and the Airflow side alike; every write is atomic (write to a
temporary file, then rename) so a reader never sees half a file, even after a crash.

Layout of ``STATE_DIR/PIPELINE_ID/``::

    checkpoint/     Spark's offset and commit logs
    status.json     current status, counters, last error, recovery attempt
    audit.jsonl     one event per line: started, fault, recovering, restarted, degraded, stopped
    exit.json       the exit payload of the last run
    dlq/            the DLQ records of every run, OpenCDC JSON lines (the queryable DLQ store)
    window.json     the DLQ nack window, carried across batches and runs
    decisions/      a decided micro-batch until every output published it (engine/decisions.py)
    stop            present while a graceful stop is requested
    acked.jsonl     positions acknowledged by ``airflow-conduit ack``: the engine skips those records
    logs/           spark-submit's output of the newest Airflow runs (``hooks/conduit.py``)
    run.lock        held (flock) by the engine that runs the pipeline, naming it (``run_lock.py``)
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from airflow_conduit.files import write_atomic

Status = Literal["running", "recovering", "degraded", "stopped", "failed"]

DEFAULT_STATE_DIR = ".conduit"


def utc_now() -> str:
    """An ISO-8601 UTC timestamp with a ``Z`` suffix, as in the exit payload."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class PipelineState:
    """Paths and accessors for one pipeline's state dir."""

    state_dir: Path
    pipeline_id: str

    @classmethod
    def of(cls, state_dir: str | os.PathLike[str], pipeline_id: str) -> PipelineState:
        return cls(Path(state_dir), pipeline_id)

    @property
    def root(self) -> Path:
        return self.state_dir / self.pipeline_id

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoint"

    @property
    def status_file(self) -> Path:
        return self.root / "status.json"

    @property
    def audit_file(self) -> Path:
        return self.root / "audit.jsonl"

    @property
    def exit_file(self) -> Path:
        return self.root / "exit.json"

    @property
    def dlq_dir(self) -> Path:
        return self.root / "dlq"

    @property
    def decisions_dir(self) -> Path:
        return self.root / "decisions"

    @property
    def window_file(self) -> Path:
        return self.root / "window.json"

    @property
    def stop_file(self) -> Path:
        return self.root / "stop"

    @property
    def acked_file(self) -> Path:
        return self.root / "acked.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    # status -------------------------------------------------------------------------------------
    def read_status(self) -> dict[str, Any] | None:
        return read_json(self.status_file)

    def write_status(self, status: Status, **fields: Any) -> dict[str, Any]:
        """Replace the status, keeping fields of the previous one that are not given."""
        current = self.read_status() or {}
        current.update(fields)
        current.update({"pipeline": self.pipeline_id, "status": status, "updated_at": utc_now()})
        write_json_atomic(self.status_file, current)
        return current

    # audit log ----------------------------------------------------------------------------------
    def audit(self, event: str, **details: Any) -> dict[str, Any]:
        """Append one event; a line is written with a single ``write`` so lines never interleave."""
        entry = {"time": utc_now(), "pipeline": self.pipeline_id, "event": event, **details}
        self.root.mkdir(parents=True, exist_ok=True)
        with self.audit_file.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, default=str) + "\n")
        return entry

    def read_audit(self) -> list[dict[str, Any]]:
        try:
            lines = self.audit_file.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        # A crash can leave a torn last line: skip what does not parse.
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return events

    # exit payload -------------------------------------------------------------------------------
    def write_exit_payload(self, payload: dict[str, Any]) -> None:
        write_json_atomic(self.exit_file, payload)

    def read_exit_payload(self) -> dict[str, Any] | None:
        return read_json(self.exit_file)

    def generation(self) -> str:
        """Names the current checkpoint: created with it, so a fresh checkpoint gets a new, later one."""
        marker = self.checkpoint_dir / "conduit-generation"
        try:
            return marker.read_text().strip()
        except FileNotFoundError:
            value = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(value + "\n")
            return value

    # acknowledged poison records ----------------------------------------------------------------
    def ack(
        self, position: bytes, *, reason: str = "", user: str = "", source: str | None = None
    ) -> dict[str, Any]:
        """Acknowledge the record at ``position`` without writing it (of ``source`` only, or of any
        source); one line appended to ``acked.jsonl`` and an ``acked`` audit event."""
        entry = {
            "time": utc_now(),
            "position": base64.b64encode(position).decode("ascii"),
            "position_text": position.decode(errors="replace"),
            "source": source,
            "reason": reason,
            "user": user,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        with self.acked_file.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
        self.audit("acked", position=entry["position_text"], source=source, reason=reason, user=user)
        return entry

    def read_acked(self) -> list[dict[str, Any]]:
        try:
            lines = self.acked_file.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        entries = []
        for line in lines:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line
        return entries

    def acked_positions(self, source_id: str | None = None) -> set[bytes]:
        """Positions acknowledged for ``source_id`` (acks without a source apply to every source)."""
        return {
            base64.b64decode(e["position"])
            for e in self.read_acked()
            if e.get("source") in (None, source_id) or source_id is None
        }

    # graceful stop requests ---------------------------------------------------------------------
    def request_stop(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.stop_file.touch()

    def clear_stop_request(self) -> None:
        self.stop_file.unlink(missing_ok=True)

    @property
    def stop_requested(self) -> bool:
        return self.stop_file.exists()


def list_pipelines(state_dir: str | os.PathLike[str]) -> list[PipelineState]:
    """Every pipeline that has a state in ``state_dir``, sorted by id."""
    root = Path(state_dir)
    if not root.is_dir():
        return []
    return [
        PipelineState(root, child.name)
        for child in sorted(root.iterdir())
        if child.is_dir() and ((child / "status.json").exists() or (child / "exit.json").exists())
    ]
