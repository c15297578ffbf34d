"""The state dir: layout, status, audit log and exit payload (pure Python).

Written by the engine, read by the CLI and the Airflow side alike; every write is atomic (write to a
temporary file, then rename) so a reader never sees half a file, even after a crash.

Layout of ``STATE_DIR/PIPELINE_ID/``::

    checkpoint/     Spark's offset and commit logs
    status.json     current status, counters, last error, recovery attempt
    audit.jsonl     one event per line: started, fault, recovering, restarted, degraded, stopped
    exit.json       the exit payload of the last run
    batches.jsonl   one line per committed micro-batch: counts, time, source lag (``batch_log.py``)
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
import getpass
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from airflow_conduit.errors import (
    EXIT_FATAL,
    EXIT_STOPPED,
    EXIT_TRANSIENT,
    ErrorKind,
    PipelineError,
    classify_exit_code,
)
from airflow_conduit.files import write_atomic
from airflow_conduit.record import position_text

DEFAULT_STATE_DIR = ".conduit"

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
"""The one format of every timestamp in the state dir and the exit payload: ISO-8601 UTC, ``Z`` suffix."""


def format_time(moment: datetime) -> str:
    """``moment`` in :data:`TIME_FORMAT` (a naive datetime is taken as local time, as ``astimezone`` does)."""
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def parse_time(value: str | datetime) -> datetime:
    """A timezone-aware UTC datetime from an ISO-8601 string (``Z`` suffix allowed) or a datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


USER_ENV = "CONDUIT_USER"
"""Names the person a process acts for, for the audit log: set by the Airflow UI on the replay it starts
for a signed-in user (the process itself runs as the API server's system user)."""


def current_user() -> str:
    """Who runs this process, for the audit log (``ack``, ``replay``): ``$CONDUIT_USER`` when set, else the
    system user; empty when the system cannot say (a container's uid without a passwd entry)."""
    if named := os.environ.get(USER_ENV, "").strip():
        return named
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def utc_now() -> str:
    """The current time in :data:`TIME_FORMAT`, as in the exit payload."""
    return format_time(datetime.now(UTC))


class Status(StrEnum):
    """A pipeline's status, in ``status.json`` and the exit payload (DESIGN.md §4).

    A ``str``: it compares equal to its value and ``json.dumps`` writes the value.
    """

    RUNNING = "running"
    RECOVERING = "recovering"
    DEGRADED = "degraded"
    """A fatal error, or recovery gave up: retrying will not help."""
    STOPPED = "stopped"
    """A graceful stop."""
    FAILED = "failed"
    """A transient error that nobody recovers (yet): a restart may succeed."""

    @classmethod
    def of_kind(cls, kind: ErrorKind | None) -> Status:
        """How a run ended: stopped without an error, degraded if fatal, failed if transient."""
        if kind is None:
            return cls.STOPPED
        return cls.DEGRADED if kind == "fatal" else cls.FAILED

    @classmethod
    def of_error(cls, error: PipelineError | None) -> Status:
        """How a run with ``error`` ended: stopped without one, degraded if fatal, failed if transient."""
        return cls.of_kind(error.kind if error is not None else None)

    @property
    def terminal(self) -> bool:
        """The run is over (``failed`` too: only whoever recovers it turns it into ``recovering``)."""
        return self in (Status.STOPPED, Status.DEGRADED, Status.FAILED)


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class RunRecords:
    """What a run did with records: the ``records`` of the exit payload (DESIGN.md §4)."""

    read: int = 0
    acked: int = 0
    filtered: int = 0
    nacked: int = 0
    dlq: int = 0
    written: Mapping[str, int] = field(default_factory=dict)
    """Records written per destination node (``pipeline:node``)."""

    @property
    def progressed(self) -> bool:
        """At least one record was processed end to end (acked, filtered, or DLQ-handled)."""
        return self.acked > 0 or self.filtered > 0 or self.dlq > 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "acked": self.acked,
            "filtered": self.filtered,
            "nacked": self.nacked,
            "dlq": self.dlq,
            "written": dict(self.written),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RunRecords:
        """Tolerant, as readers of the payload always were: a missing or unreadable counter is 0."""
        data = data or {}
        written = data.get("written")
        return cls(
            read=_int(data.get("read")),
            acked=_int(data.get("acked")),
            filtered=_int(data.get("filtered")),
            nacked=_int(data.get("nacked")),
            dlq=_int(data.get("dlq")),
            written={str(k): _int(v) for k, v in written.items()} if isinstance(written, Mapping) else {},
        )


_PAYLOAD_KEYS = (
    "pipeline",
    "status",
    "exit_code",
    "error",
    "records",
    "batches",
    "started_at",
    "ended_at",
    "duration_seconds",
    "dlq",
    "state_dir",
    "spark_submit_returncode",
)


@dataclass(frozen=True)
class ExitPayload:
    """How a run ended: ``STATE_DIR/PIPELINE_ID/exit.json`` and the last line of the engine's stdout
    (DESIGN.md §4).

    :meth:`to_dict` gives the JSON, keys in the contract's order; the optional fields that are ``None``
    are left out (a payload written before the run got going has no ``batches``, ``dlq`` ...).
    :meth:`from_dict` reads any payload, old or hand-written, with the defaults its readers always used.
    """

    pipeline: str
    status: Status
    exit_code: int
    error: PipelineError | None = None
    records: RunRecords | None = None
    """``None``: the run left no counters (the payload says ``"records": {}``)."""
    batches: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    duration_seconds: float | None = None
    dlq: Mapping[str, Any] | None = None
    """The engine's summary of this run's DLQ records: ``records``, ``path``, ``files``, positions, errors."""
    state_dir: str | None = None
    """The pipeline's state dir (``STATE_DIR/PIPELINE_ID``), as the engine saw it."""
    spark_submit_returncode: int | None = None
    """Set by the Airflow hook on a payload it synthesised for a job that left none."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept so that reading and writing a payload loses nothing."""

    @classmethod
    def failure(
        cls,
        pipeline: str,
        error: PipelineError,
        *,
        exit_code: int | None = None,
        started_at: str | None = None,
        ended_at: str | None = None,
        records: RunRecords | None = None,
        batches: int | None = None,
        spark_submit_returncode: int | None = None,
    ) -> ExitPayload:
        """The payload of a run that failed before or outside the engine's own accounting (an invalid
        plan, a run refused by the lock, a job that left no payload, an engine that vanished).

        The status follows the error (``degraded`` if fatal, ``failed`` if transient); the exit code
        too unless given (``2`` for an invalid config); the times default to now.
        """
        now = utc_now()
        return cls(
            pipeline=pipeline,
            status=Status.of_error(error),
            exit_code=error.exit_code if exit_code is None else exit_code,
            error=error,
            records=records,
            batches=batches,
            started_at=started_at or now,
            ended_at=ended_at or now,
            spark_submit_returncode=spark_submit_returncode,
        )

    @property
    def kind(self) -> ErrorKind | None:
        """How the run ended: ``None`` for a graceful stop, else ``fatal`` or ``transient`` - the error's
        kind first, else the exit code's."""
        if self.error is not None:
            return self.error.kind
        return classify_exit_code(self.exit_code)

    @property
    def counters(self) -> RunRecords:
        """The records counters, zero when the run left none."""
        return self.records if self.records is not None else RunRecords()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "pipeline": self.pipeline,
            "status": str(self.status),
            "exit_code": self.exit_code,
            "error": self.error.to_dict() if self.error is not None else None,
            "records": self.records.to_dict() if self.records is not None else {},
        }
        optional = {
            "batches": self.batches,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_seconds": self.duration_seconds,
            "dlq": dict(self.dlq) if self.dlq is not None else None,
            "state_dir": self.state_dir,
            "spark_submit_returncode": self.spark_submit_returncode,
        }
        data.update({key: value for key, value in optional.items() if value is not None})
        data.update({key: value for key, value in self.extra.items() if key not in data})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExitPayload:
        """Read a payload as found on disk or on stdout, tolerating what readers always tolerated.

        A missing ``error`` is none; missing ``records`` are none (``{}``); a missing or unknown
        ``status`` and a missing ``exit_code`` follow from the rest (an error's kind, else a graceful
        stop); an error without ``kind`` takes the exit code's.
        """
        given = data.get("exit_code")
        given_code = None if given is None else _int(given, EXIT_TRANSIENT)
        error = _error_from_dict(data.get("error"), given_code)
        code = given_code if given_code is not None else _status_exit_code(data.get("status"), error)
        try:
            status = Status(str(data.get("status")))
        except ValueError:
            status = Status.of_error(error) if error is not None else Status.of_kind(classify_exit_code(code))
        records = data.get("records")
        dlq = data.get("dlq")
        batches, duration, returncode = (
            data.get("batches"),
            data.get("duration_seconds"),
            data.get("spark_submit_returncode"),
        )
        return cls(
            pipeline=str(data.get("pipeline") or ""),
            status=status,
            exit_code=code,
            error=error,
            records=RunRecords.from_dict(records) if isinstance(records, Mapping) and records else None,
            batches=_int(batches) if batches is not None else None,
            started_at=_str_or_none(data.get("started_at")),
            ended_at=_str_or_none(data.get("ended_at")),
            duration_seconds=float(duration) if isinstance(duration, int | float) else None,
            dlq=dict(dlq) if isinstance(dlq, Mapping) else None,
            state_dir=_str_or_none(data.get("state_dir")),
            spark_submit_returncode=_int(returncode) if returncode is not None else None,
            extra={key: value for key, value in data.items() if key not in _PAYLOAD_KEYS},
        )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _status_exit_code(status: Any, error: PipelineError | None) -> int:
    """The exit code of a payload that names none: its error's, else its status's (0 if neither)."""
    if error is not None:
        return error.exit_code
    return {"degraded": EXIT_FATAL, "failed": EXIT_TRANSIENT}.get(str(status), EXIT_STOPPED)


def _error_from_dict(data: Any, exit_code: int | None) -> PipelineError | None:
    """The payload's error, or ``None``; an error without ``kind`` takes the exit code's."""
    if not isinstance(data, Mapping) or not data:
        return None
    kind = data.get("kind")
    if kind not in ("fatal", "transient"):
        kind = (classify_exit_code(exit_code) if exit_code is not None else None) or "transient"
    node = data.get("node")
    return PipelineError(
        kind=kind,
        code=str(data.get("code") or "error"),
        message=str(data.get("message") or ""),
        node=None if node is None else str(node),
    )


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def path_segment(conduit_id: str) -> str:
    """The one file-name form of a Conduit id (a pipeline's state dir, a destination's delivery marker).

    Conduit ids may hold ``:`` (``orders:v2``), which Hadoop's ``Path`` reads as a URI scheme in a relative
    segment ("Relative path in absolute URI") and which Windows refuses; it becomes ``~``, a character no
    id can hold, so the form is reversible (:func:`id_of_segment`) and ids without ``:`` keep their old
    directories. Everything else in Conduit's alphabet (letters, digits, ``_ - . :``) is safe in a path;
    the loader refuses ``.`` and ``..``.
    """
    return conduit_id.replace(":", "~")


def id_of_segment(segment: str) -> str:
    """The id :func:`path_segment` made ``segment`` of."""
    return segment.replace("~", ":")


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
        return self.state_dir / path_segment(self.pipeline_id)

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
    def batches_file(self) -> Path:
        """The per-batch history (:mod:`airflow_conduit.batch_log`)."""
        return self.root / "batches.jsonl"

    @property
    def dlq_dir(self) -> Path:
        return self.root / "dlq"

    @property
    def decisions_dir(self) -> Path:
        return self.root / "decisions"

    @property
    def memo_dir(self) -> Path:
        """What the Python mappers of a batch attempt yielded (engine/processors/_memo.py)."""
        return self.root / "memo"

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
    def write_exit_payload(self, payload: ExitPayload | Mapping[str, Any]) -> None:
        data = payload.to_dict() if isinstance(payload, ExitPayload) else dict(payload)
        write_json_atomic(self.exit_file, data)

    def read_exit_payload(self) -> dict[str, Any] | None:
        """``exit.json`` as written (see :meth:`read_exit` for the typed payload)."""
        return read_json(self.exit_file)

    def read_exit(self) -> ExitPayload | None:
        """``exit.json`` as an :class:`ExitPayload`; ``None`` when there is none or it is not a JSON object."""
        data = self.read_exit_payload()
        return ExitPayload.from_dict(data) if isinstance(data, Mapping) else None

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
        self,
        position: bytes,
        *,
        reason: str = "",
        user: str = "",
        source: str | None = None,
        dlq_entry: str | None = None,
    ) -> dict[str, Any]:
        """Acknowledge the record at ``position`` without writing it (of ``source`` only, or of any
        source); one line appended to ``acked.jsonl`` and an ``acked`` audit event.

        :param dlq_entry: the DLQ entry acknowledged (``FILE:LINE``, the UI's DLQ browser): a replay never
            sends that entry. An ack without one (``airflow-conduit ack`` of a poison record) only lets
            the pipeline past the record; a replay after the fix still delivers its DLQ entry.
        """
        entry = {
            "time": utc_now(),
            "position": base64.b64encode(position).decode("ascii"),
            "position_text": position_text(position),
            "source": source,
            "reason": reason,
            "user": user,
        }
        if dlq_entry is not None:
            entry["dlq_entry"] = dlq_entry
        self.root.mkdir(parents=True, exist_ok=True)
        with self.acked_file.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
        extra = {"dlq_entry": dlq_entry} if dlq_entry is not None else {}
        self.audit("acked", position=entry["position_text"], source=source, reason=reason, user=user, **extra)
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
        PipelineState(root, id_of_segment(child.name))
        for child in sorted(root.iterdir())
        if child.is_dir() and ((child / "status.json").exists() or (child / "exit.json").exists())
    ]
