"""Conduit's ``custom.javascript`` runtime: a user's ``process(record)`` in embedded V8 (``mini-racer``).

Pure Python (no Spark): ``validate`` loads a script here to refuse one that does not compile, and the
engine runs batches of records through it. A call into V8 costs ~0.2 ms, so records cross in batches:
one JSON text in, one out, per Arrow batch (:meth:`Runtime.run`); the script is compiled once per
process (:func:`runtime_for`). ``prelude.js`` defines what Conduit gives a script.
"""

from __future__ import annotations

import atexit
import json
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PRELUDE = (Path(__file__).with_name("prelude.js")).read_text()
SCRIPT_NAME = "script.js"
"""The script's name in JavaScript stack traces (``at process (script.js:2:11)``)."""
LOAD_TIMEOUT = 5.0
"""Seconds the script's top-level code may run at ``validate``."""

log = logging.getLogger(__name__)

Data = tuple[str | None, bytes | None]
"""A data field as the engine's columns hold it: (structured JSON text, raw bytes); both None: nil."""
Outcome = None | str | tuple[bytes | None, str, dict[str, str], Data, Data, Data]
"""What ``process`` made of a record: None (filtered), an error message (nack), or the record as
(position, operation, metadata, key, before, after)."""


class ScriptError(ValueError):
    """The script does not load (Conduit refuses it when the processor opens); ``line`` in the script."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def _text(value: str) -> str:
    return json.dumps(value)


def _data_item(data: Data) -> str:
    text, raw = data
    if text is not None:
        return f"[{text}]"
    if raw is not None:
        return _text(bytes(raw).decode("latin-1"))  # one char per byte: JSON carries no bytes
    return "null"


def encode(
    position: bytes | None,
    operation: str,
    metadata: Mapping[str, str] | Iterable[tuple[str, str]] | None,
    key: Data,
    before: Data,
    after: Data,
) -> str:
    """One record as the prelude's batch runner reads it; structured data is embedded as the JSON text
    the engine already holds (no parsing in Python)."""
    pos = "null" if position is None else _text(bytes(position).decode("latin-1"))
    meta = json.dumps(dict(metadata or ()))
    return f"[{pos},{_text(operation)},{meta},{_data_item(key)},{_data_item(before)},{_data_item(after)}]"


def encode_value(value: Any) -> Data:
    """A record dict's data value (dict: structured, bytes: raw) as the engine's columns hold it."""
    if value is None:
        return None, None
    if isinstance(value, bytes | bytearray):
        return None, bytes(value)
    if isinstance(value, str):
        return None, value.encode()
    return json.dumps(value), None


def _data_out(value: Any) -> Data:
    if value is None:
        return None, None
    if isinstance(value, str):
        return None, value.encode("latin-1")
    return value[0], None


def _outcome(result: Any) -> Outcome:
    if result is None:
        return None
    if isinstance(result, dict):
        return str(result["e"])
    position, operation, metadata, key, before, after = result
    return (
        None if position is None else position.encode("latin-1"),
        operation,
        metadata,
        _data_out(key),
        _data_out(before),
        _data_out(after),
    )


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
        from py_mini_racer import JSEvalException, JSParseException, JSTimeoutException, MiniRacer

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
            self._run = self._context.eval("__conduitRunBatch")
        except BaseException:
            self._context.close()
            raise

    def run(self, items: list[str]) -> list[Outcome]:
        """Each encoded record (:func:`encode`) through ``process``, in order, in one call into V8."""
        if not items:
            return []
        results, lines = json.loads(self._run("[" + ",".join(items) + "]"))
        if lines:
            _log(lines)
        return [_outcome(result) for result in results]

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
