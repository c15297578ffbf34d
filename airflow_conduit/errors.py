"""Error kinds and codes shared by the engine, the CLI and the Airflow side (pure Python).

Exception types do not survive Py4J, so the engine records errors as :class:`PipelineError` values
(kind, code, message, node) and every consumer classifies by ``kind`` alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

ErrorKind = Literal["fatal", "transient"]

EXIT_STOPPED = 0
EXIT_FATAL = 1
EXIT_CONFIG = 2
EXIT_TRANSIENT = 75  # EX_TEMPFAIL: a restart may succeed


class Code:
    """Error codes found in ``exit.json``; stable strings that users may match on."""

    INVALID_CONFIG = "invalid_config"
    DLQ_THRESHOLD_EXCEEDED = "dlq_threshold_exceeded"
    DLQ_WRITE_FAILED = "dlq_write_failed"
    PROCESSOR_FATAL = "processor_fatal"
    PROCESSOR_TRANSIENT = "processor_transient"
    SOURCE_FAILED = "source_failed"
    DESTINATION_FAILED = "destination_failed"
    SPARK_FAILED = "spark_failed"
    STOP_TIMEOUT = "stop_timeout"
    INTERRUPTED = "interrupted"
    CANNOT_RECOVER = "cannot_recover"  # max-retries used up inside max-retries-window
    PIPELINE_LOCKED = "pipeline_locked"  # another engine runs the pipeline (run.lock): this run was refused


CODE_NOTE = "conduit error code: "
"""How a :class:`ConduitError`'s code appears in its traceback (an exception note)."""


class ConduitError(Exception):
    """Base of the errors a user's ``custom.python`` code may raise to stop the pipeline."""

    kind: ErrorKind = "transient"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        if code:
            # Raised on an executor, the error reaches the driver only as traceback text: the note is
            # printed under the exception's line, so the engine can read the code back.
            self.add_note(f"{CODE_NOTE}{code}")


class TransientError(ConduitError):
    """Stops the pipeline as transient: the record is not nacked and a restart retries it."""

    kind: ErrorKind = "transient"


class FatalError(ConduitError):
    """Stops the pipeline as fatal: it becomes degraded and retrying will not help."""

    kind: ErrorKind = "fatal"


@dataclass(frozen=True)
class PipelineError:
    """A structured error as written to ``exit.json`` and the audit log."""

    kind: ErrorKind
    code: str
    message: str
    node: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_FATAL if self.kind == "fatal" else EXIT_TRANSIENT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PipelineError:
        return cls(kind=data["kind"], code=data["code"], message=data["message"], node=data.get("node"))


class PipelineStopped(Exception):
    """Raised inside the engine to stop the run with a structured error."""

    def __init__(self, error: PipelineError) -> None:
        super().__init__(f"{error.kind} error {error.code} at {error.node}: {error.message}")
        self.error = error


def classify_exit_code(exit_code: int) -> ErrorKind | None:
    """The error kind an engine exit code stands for; ``None`` for a graceful stop."""
    if exit_code == EXIT_STOPPED:
        return None
    if exit_code in (EXIT_FATAL, EXIT_CONFIG):
        return "fatal"
    # 75, and anything unexpected (a killed JVM, a lost driver): transient, as in Conduit.
    return "transient"
