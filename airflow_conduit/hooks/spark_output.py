"""spark-submit's output: the whole of it to a file, the part a person needs to the task log."""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

SPARK_OUTPUT_FILES_KEPT = 20
"""How many ``spark-submit-*.log`` files a pipeline's ``logs/`` dir keeps (the newest)."""


def parse_payload_line(line: str) -> dict[str, Any] | None:
    """The exit payload if ``line`` is one (a JSON object with ``pipeline`` and ``exit_code``)."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict) and "exit_code" in data and "pipeline" in data:
        return data
    return None


# A record of the engine's Python logging (cli._setup_logging), from one of its airflow_conduit loggers.
_ENGINE_RECORD = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) airflow_conduit[\w.]*: "
)
_ENGINE_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING}
# Lines that are never part of the end-of-run summary: log4j records (Spark's default layout and the
# engine's log4j2.properties), other Python loggers, Java and Python traces.
_NOT_SUMMARY = re.compile(
    r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} |\s+at |\s*\.\.\. \d+ more"
    r"|Caused by: |Traceback \(most recent call last\)|\s*File \")"
)
# The summary table's title (cli.print_summary), with all whitespace removed: rich wraps it to the
# table's width, so it may come as several lines.
_SUMMARY_TITLE = re.compile(r"^pipeline\S+:\w+\(exit-?\d+\)$")
_TITLE_START = re.compile(r"^\s*pipeline(\s|$)")
_SUMMARY_TITLE_LINES = 6


class SparkOutputFilter:
    """Sorts spark-submit's output lines into what the task log shows at INFO and what only at DEBUG.

    A person reading the task log needs the engine's own log records (progress, warnings, errors, at
    their own level) and its end-of-run summary (``cli.print_summary``: a table under the title
    ``pipeline ID: STATUS (exit N)``, an error line, the DLQ's path). Everything else (Spark's log4j
    records, Java and Py4J traces, the continuation lines of multi-line records, the exit-payload line)
    goes to DEBUG: it is all in the run's output file. The summary starts at its title, which is only
    known to be one when the table's top border follows, so a few lines may be held back until then;
    it ends at the next engine record or exit-payload line.
    """

    def __init__(self) -> None:
        self._held: list[str] = []
        self._in_summary = False

    def feed(self, line: str) -> list[tuple[int, str]]:
        """The (level, text) records for one more output line, in order (maybe none yet)."""
        text = line.rstrip()
        if not self._held:
            return self._sort(text)
        if text.lstrip().startswith("\u250f") and _is_summary_title(self._held):  # the table's top border
            title = " ".join(held.strip() for held in self._held)
            self._held = []
            self._in_summary = True
            return [(logging.INFO, title), (logging.INFO, text)]
        if len(self._held) < _SUMMARY_TITLE_LINES and not self._ends_title(text):
            self._held.append(text)
            return []
        return self.flush() + self._sort(text)

    def flush(self) -> list[tuple[int, str]]:
        """The records of lines held back (at the end of the output, or once they are no title)."""
        held, self._held = self._held, []
        return [(self._plain_level(text), text) for text in held]

    def _sort(self, text: str) -> list[tuple[int, str]]:
        engine = _ENGINE_RECORD.match(text)
        if engine:
            self._in_summary = False
            return [(_ENGINE_LEVELS.get(engine.group(1), logging.ERROR), text)]
        if parse_payload_line(text) is not None:
            self._in_summary = False
            return [(logging.DEBUG, text)]
        if _TITLE_START.match(text):
            self._held = [text]  # perhaps the title of a summary
            return []
        return [(self._plain_level(text), text)]

    def _plain_level(self, text: str) -> int:
        return logging.INFO if self._in_summary and not _NOT_SUMMARY.match(text) else logging.DEBUG

    @staticmethod
    def _ends_title(text: str) -> bool:
        return bool(_ENGINE_RECORD.match(text) or _NOT_SUMMARY.match(text) or parse_payload_line(text))


def _is_summary_title(lines: list[str]) -> bool:
    return bool(_SUMMARY_TITLE.match(re.sub(r"\s+", "", "".join(lines))))


class _OutputEcho:
    """The logger ``SparkSubmitHook`` gets while it reads spark-submit's output.

    The provider logs every output line at INFO (``log.info(line)``); that echo is dropped here, as
    :class:`ConduitSparkSubmitHook` has logged the line at the level :class:`SparkOutputFilter` gave
    it. Every other message (``Identified spark driver id: ...``) passes to the real logger.
    """

    def __init__(self, log: Any, hook: ConduitSparkSubmitHook) -> None:
        self._log = log
        self._hook = hook

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs or msg != self._hook.echo:
            self._log.info(msg, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


class ConduitSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` that keeps the job's exit-payload line and the tail of its output, writes the
    whole output to ``output_file``, and logs each line at the level :class:`SparkOutputFilter` gives it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.payload_line: dict[str, Any] | None = None
        self.output_tail: deque[str] = deque(maxlen=200)
        self.output_file: TextIO | None = None
        self.output_path: Path | None = None
        self.echo: str | None = None
        """The current output line as the provider echoes it (stripped)."""
        self._filter = SparkOutputFilter()

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        task_log = self.log
        # LoggingMixin's logger, for the provider's parsing. A duck-typed stand-in, not a Logger: it
        # forwards every call but the echo of an output line (the real one is a structlog logger anyway).
        self._log = cast("Logger", _OutputEcho(task_log, self))
        try:
            super()._process_spark_submit_log(self._tee(itr, task_log))
        finally:
            self._log = task_log
            self._emit(task_log, self._filter.flush())

    def _tee(self, itr: Iterator[Any], task_log: Any) -> Iterator[Any]:
        for line in itr:
            self._write_output(line)
            self.output_tail.append(line.rstrip("\n"))
            payload = parse_payload_line(line)
            if payload is not None:
                self.payload_line = payload
            self.echo = line.strip()
            self._emit(task_log, self._filter.feed(line))
            yield line

    @staticmethod
    def _emit(task_log: Any, records: list[tuple[int, str]]) -> None:
        for level, text in records:
            task_log.log(level, "%s", text)

    def _write_output(self, line: str) -> None:
        if self.output_file is None:
            return
        try:
            self.output_file.write(line if line.endswith("\n") else line + "\n")
        except OSError as error:  # a full disk: the task log still has every line at DEBUG
            self.output_file = None
            self.log.warning("Cannot write spark-submit's output to its file: %s", error)

    def close_output(self) -> None:
        output, self.output_file = self.output_file, None
        if output is not None:
            output.close()


def prune_spark_outputs(directory: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` output files (their names sort by time)."""
    for old in sorted(directory.glob("spark-submit-*.log"))[:-keep]:
        old.unlink(missing_ok=True)
