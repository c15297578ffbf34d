"""A streaming query's progress, read from the JSON Spark writes for it.

PySpark's own listener converts each progress event field by field over py4j. Each Java collection it
walks (the sources, the durations, the observed metrics, ...) ends in a ``NoSuchElementException``,
which PySpark converts to a Python error by testing it against each error class it knows; each test
looks up ``py4j.reflection.TypeUtil`` by name, and the JVM first searches every jar of the class path
for the package names (``py4j``, ``py4j.reflection``) as classes. Measured on a pipeline of 10-record
micro-batches: 57-60 ms of CPU per progress event, that is per micro-batch, on a driver with 2 cores.
Here one py4j call fetches the event's JSON and Python parses it: 0.9 ms.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark import SparkContext
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

logger = logging.getLogger("airflow_conduit.engine")


@dataclass(frozen=True)
class SourceProgress:
    description: str
    input_rows: int


@dataclass(frozen=True)
class Progress:
    """What the engine reads of one micro-batch's ``StreamingQueryProgress``."""

    name: str | None
    run_id: str
    batch_id: int
    sources: tuple[SourceProgress, ...] = ()
    durations_ms: Mapping[str, int] = field(default_factory=dict)
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None

    @classmethod
    def from_json(cls, text: str) -> Progress:
        """Spark's ``StreamingQueryProgress.json``; it leaves out a rate that is not a number."""
        fields: dict[str, Any] = json.loads(text)
        return cls(
            name=fields.get("name"),
            run_id=str(fields["runId"]),
            batch_id=int(fields["batchId"]),
            sources=tuple(
                SourceProgress(str(source.get("description", "")), int(source.get("numInputRows") or 0))
                for source in fields.get("sources") or ()
            ),
            durations_ms={str(phase): int(ms) for phase, ms in (fields.get("durationMs") or {}).items()},
            input_rows_per_second=_rate(fields.get("inputRowsPerSecond")),
            processed_rows_per_second=_rate(fields.get("processedRowsPerSecond")),
        )


def _rate(value: Any) -> float | None:
    if value is None:
        return None
    rate = float(value)
    return None if math.isnan(rate) else rate


class ProgressListener(StreamingQueryListener):
    """Calls ``on_progress`` with the :class:`Progress` of every micro-batch of the session's queries.

    Register it with ``spark.streams.addListener``. Spark calls :class:`_JsonEvents` rather than
    PySpark's converter; the ``onQuery*`` methods here only serve a PySpark that ignores
    ``_jlistener`` (they read the same JSON, the slow way).

    :param on_progress: called on py4j's callback thread; an exception is logged, never raised to Spark
    """

    def __init__(self, on_progress: Callable[[Progress], None]) -> None:
        self._on_progress = on_progress
        self._java: Any = None

    @property
    def _jlistener(self) -> Any:
        # What PySpark's addListener and removeListener hand to Spark: the same object for both.
        if self._java is None:
            jvm: Any = SparkContext._jvm
            self._java = jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self.progress_json))
        return self._java

    def progress_json(self, text: str) -> None:
        try:
            self._on_progress(Progress.from_json(text))
        except Exception:  # raised to Spark, it would only be logged by py4j, far from its cause
            logger.warning("could not read or record a streaming progress event", exc_info=True)

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        self.progress_json(event.progress.json)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass


class _JsonEvents:
    """Implements Spark's ``PythonStreamingQueryListener`` (a py4j callback): a progress event is
    passed on as its JSON, one py4j call."""

    def __init__(self, progress_json: Callable[[str], None]) -> None:
        self._progress_json = progress_json

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self._progress_json(jevent.progress().json())

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
