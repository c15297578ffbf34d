"""``custom.python`` processors that inject failures into a real engine run (the engine's own path).

Parameters come from the job's environment (``env_vars`` of the operator), which local Spark's Python
workers inherit:

- ``CONDUIT_FLAKY_MARKER``: a file; the first call writes the time into it.
- ``CONDUIT_FLAKY_CLEAR_AFTER``: seconds after that first call during which every record raises
  :class:`~airflow_conduit.errors.TransientError` (``inf``: it never clears).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airflow_conduit.errors import FatalError, TransientError


def _first_failure(marker: Path, now: float) -> float:
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        for _ in range(50):
            text = marker.read_text().strip()
            if text:
                return float(text)
            time.sleep(0.01)
        return now
    with os.fdopen(fd, "w") as fh:
        fh.write(repr(now))
    return now


def fail_for_a_while(record: dict[str, Any]) -> dict[str, Any]:
    """Raise ``TransientError`` until ``CONDUIT_FLAKY_CLEAR_AFTER`` seconds after the first call."""
    marker = Path(os.environ["CONDUIT_FLAKY_MARKER"])
    clear_after = float(os.environ.get("CONDUIT_FLAKY_CLEAR_AFTER", "inf"))
    now = time.time()
    first = _first_failure(marker, now)
    if now - first < clear_after:
        raise TransientError(f"flaky dependency unavailable ({now - first:.1f}s after the first failure)")
    return record


def always_fatal(record: dict[str, Any]) -> dict[str, Any]:
    """Stop the pipeline as fatal on the first record."""
    raise FatalError("the dependency rejected the credentials", code="test_fatal")
