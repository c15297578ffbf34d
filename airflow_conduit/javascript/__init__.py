"""Conduit's ``custom.javascript`` runtime: a user's ``process(record)`` in embedded V8 (``mini-racer``).

Pure Python (no Spark): ``validate`` loads a script here to refuse one that does not compile, and the
engine runs batches of records through it. A call into V8 costs ~0.2 ms, so records cross in batches:
the batch's columns as one JSON text in, one out (:meth:`Runtime.run`); the script is compiled once per
process (:func:`runtime_for`). ``prelude.js`` defines what Conduit gives a script.
"""

from __future__ import annotations

import atexit
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PRELUDE = (Path(__file__).with_name("prelude.js")).read_text()
SCRIPT_NAME = "script.js"
"""The script's name in JavaScript stack traces (``at process (script.js:2:11)``)."""
LOAD_TIMEOUT = 5.0
"""Seconds the script's top-level code may run at ``validate``."""

log = logging.getLogger(__name__)

INPUT_COLUMNS = (
    "position",
    "operation",
    "metadata",
    "key_json",
    "key_raw",
    "before_json",
    "before_raw",
    "after_json",
    "after_raw",
)
"""The engine's record columns a batch carries into V8 (``*_json``: structured data as JSON text)."""
STATE_RECORD, STATE_FILTERED, STATE_NACKED = 0, 1, 2
"""``state`` of a result row: the record (the other columns), filtered, nacked (``error``)."""
CHANGED = {
    "position": 1,
    "operation": 2,
    "metadata": 4,
    "key_json": 8,
    "key_raw": 8,
    "before_json": 16,
    "before_raw": 16,
    "after_json": 32,
    "after_raw": 32,
}
"""The bit of ``changed`` (prelude.js) that says a result row sets the column."""


class ScriptError(ValueError):
    """The script does not load (Conduit refuses it when the processor opens); ``line`` in the script."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def _latin1(values: Sequence[bytes | None]) -> list[str | None]:
    # One char per byte: JSON carries no bytes, and latin-1 maps each byte to itself both ways.
    return [None if value is None else bytes(value).decode("latin-1") for value in values]


def _bytes(values: list[str | None]) -> list[bytes | None]:
    return [None if value is None else value.encode("latin-1") for value in values]


def encode_value(value: Any) -> tuple[str | None, bytes | None]:
    """A record dict's data value (dict: structured, bytes: raw) as the engine's columns hold it."""
    if value is None:
        return None, None
    if isinstance(value, bytes | bytearray):
        return None, bytes(value)
    if isinstance(value, str):
        return None, value.encode()
    return json.dumps(value), None


def _dumps(value: Any) -> str:
    try:
        import orjson  # the engine's extra: several times faster than json on a batch
    except ImportError:
        return json.dumps(value)
    return orjson.dumps(value).decode()


def _loads(text: str) -> Any:
    try:
        import orjson
    except ImportError:
        return json.loads(text)
    return orjson.loads(text)


_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
    "panic": logging.CRITICAL,
}


def _log(lines: list[list[Any]]) -> None:
    for level, message, fields in lines:
        extra = f" {json.dumps(fields, default=str)}" if fields else ""
        log.log(_LEVELS.get(level, logging.INFO), "%s%s", message, extra)


_LOCATION = re.compile(r"^\S*?:(\d+): (.*)$")


def _script_error(prefix: str, error: Exception) -> ScriptError:
    """V8's ``script.js:2: SyntaxError: Unexpected token ';'`` (then the source line) as one line."""
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    match = _LOCATION.match(first)
    if match:
        line = int(match.group(1))
        return ScriptError(f"{prefix}: line {line}: {match.group(2)}", line)
    return ScriptError(f"{prefix}: {first}")


class Runtime:
    """One V8 context with the prelude and the user's script loaded, ``process`` found."""

    def __init__(self, source: str, timeout: float | None = None) -> None:
        from py_mini_racer import JSEvalException, JSFunction, JSParseException, JSTimeoutException, MiniRacer

        self._context = MiniRacer()
        try:
            self._context.eval(PRELUDE)
            try:
                self._context.eval(f"{source}\n//# sourceURL={SCRIPT_NAME}", timeout_sec=timeout)
            except JSParseException as error:
                raise _script_error(
                    "failed initializing JS function: failed to compile script", error
                ) from None
            except JSTimeoutException:
                # One more call takes the cancelled call's late callback (else it lands on a closed loop).
                self._context.eval("0")
                raise ScriptError(
                    f"failed initializing JS function: the script's top level ran longer than {timeout:g}s"
                ) from None
            except JSEvalException as error:
                raise _script_error("failed initializing JS function: failed to run program", error) from None
            try:
                # `process` as the script sees it: a function declaration or a top-level let/const.
                self._context.eval(
                    "__conduitSetEntrypoint(typeof process === 'undefined' ? undefined : process)"
                )
            except JSEvalException:
                raise ScriptError(
                    'failed initializing JS function: failed to get entrypoint function "process"'
                ) from None
            run = self._context.eval("__conduitRunBatch")
            assert isinstance(run, JSFunction)  # the prelude defines it
            self._run = run
        except BaseException:
            self._context.close()
            raise

    def run(self, columns: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        """Each record of the columns (:data:`INPUT_COLUMNS`; ``metadata`` as dicts)
        through ``process``, in order, in one call into V8. Returns the output columns: ``state``,
        ``error``, ``changed`` (:data:`CHANGED` bits: the columns the script touched) and the input's
        (set where ``changed`` says), bytes as bytes."""
        batch = {
            name: list(columns[name])
            for name in ("operation", "metadata", "key_json", "before_json", "after_json")
        }
        for name in ("position", "key_raw", "before_raw", "after_raw"):
            batch[name] = _latin1(columns[name])
        if not batch["operation"]:
            return {name: [] for name in ("state", "changed", "error", *INPUT_COLUMNS)}
        out = _loads(str(self._run(_dumps(batch))))
        lines = out.pop("logs")
        if lines:
            _log(lines)
        for name in ("position", "key_raw", "before_raw", "after_raw"):
            out[name] = _bytes(out[name])
        return out

    def close(self) -> None:
        # Release the function handle before the context: a handle outliving it can hang the exit.
        del self._run
        self._context.close()


def check_script(source: str) -> ScriptError | None:
    """Why the script would not load (a syntax error, no ``process``), or None; None as well when the
    JavaScript engine is not installed here (the Airflow side validates without the engine's extras)."""
    try:
        import py_mini_racer  # noqa: F401
    except ImportError:
        return None
    try:
        Runtime(source, timeout=LOAD_TIMEOUT).close()
    except ScriptError as error:
        return error
    return None


_RUNTIMES: dict[str, Runtime] = {}


def runtime_for(source: str) -> Runtime:
    """This process's runtime for ``source``: compiled once per Python worker, reused by every batch (as
    Conduit reuses its goja contexts, a script's globals persist between records)."""
    runtime = _RUNTIMES.get(source)
    if runtime is None:
        runtime = _RUNTIMES[source] = Runtime(source)
    return runtime


@atexit.register
def _close_all() -> None:
    while _RUNTIMES:
        _RUNTIMES.popitem()[1].close()
