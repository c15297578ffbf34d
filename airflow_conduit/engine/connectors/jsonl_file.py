"""One OpenCDC JSON-lines file that micro-batches are appended to, exactly once: Conduit's meaning of
the ``builtin:file`` destination ``path`` (the records appended to one file, one per line).

A batch is written by Spark into a hidden staging directory beside the file (``.NAME._tmp-PREFIX``).
Beside the file, its marker ``.NAME.delivery.json`` holds the hash of the last delivery appended and
the file's committed length. Publishing a batch is:

1. cut the file back to the marker's length (a torn tail: what a crash left beyond it);
2. append the staged lines in partition order, and fsync;
3. replace the marker (:func:`~airflow_conduit.files.write_atomic`) with the delivery's hash and the
   new length: the commit point;
4. remove the staging directory.

A crash before step 3 leaves the old marker: the replayed batch is not :func:`delivered`, so it is
appended again after step 1 cut the first attempt's lines. A crash after it leaves the new marker: the
replay is skipped. The first batch writes a marker for the file as it found it (an existing file's
content is kept, as Conduit appends to it), so even the first append is undone by a replay. One writer
per file: anything else appended to it is cut as a torn tail.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.errors import FatalError
from airflow_conduit.files import write_atomic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_conduit.config.settings.record_format import RecordFormat

logger = logging.getLogger("airflow_conduit.engine")

Layout = Literal["directory", "file"]
_announced: set[tuple[str, str]] = set()


def layout(path: str) -> Layout:
    """What a file destination's ``path`` names.

    An existing directory, or a path ending in ``/``: a directory of JSON-lines files. An existing
    regular file, or a path that does not exist and whose last component has an extension
    (``out.jsonl``): one file, appended to (Conduit's meaning). A path that does not exist and has no
    extension: a directory, as before this rule. Anything else that exists (a device, a pipe) is refused:
    a configuration mistake that retrying cannot fix.
    """
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        return "directory"
    if os.path.lexists(path):
        if os.path.isfile(path):
            return "file"
        raise FatalError(
            f"{path} exists and is neither a directory nor a regular file: the file destination appends "
            "JSON lines to a file or writes JSON-lines files into a directory; name one of those, or a "
            "path that does not exist yet"
        )
    return "file" if os.path.splitext(os.path.basename(path))[1] else "directory"


def announce(path: str, chosen: Layout, node: str) -> None:
    """Say once per process which layout a destination got: the rule depends on the file system."""
    if (path, chosen) not in _announced:
        _announced.add((path, chosen))
        what = "one JSON-lines file, appended to" if chosen == "file" else "a directory of JSON-lines files"
        logger.info("destination %s: %s is %s", node, os.path.abspath(path), what)


def marker_path(target: Path) -> Path:
    return target.parent / f".{target.name}.delivery.json"


def read_marker(target: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads(marker_path(target).read_text())
    except FileNotFoundError:
        return None
    return marker if isinstance(marker, dict) else None


def delivered(target: str | Path, delivery: Delivery) -> bool:
    """Whether ``target`` already holds ``delivery`` (its marker names the same hash)."""
    marker = read_marker(Path(target))
    return bool(delivery.hash) and marker is not None and marker.get("hash") == delivery.hash


def commit_marker(target: Path, marker: dict[str, Any]) -> None:
    """Step 3, the commit point (a function of its own so that tests can fail it on demand)."""
    write_atomic(marker_path(target), json.dumps(marker))


@dataclass(frozen=True)
class AppendedFile:
    """A batch staged for appending to ``target``; :meth:`publish` appends it as above."""

    staging: Path
    target: Path
    delivery: Delivery
    nacks: list[tuple[int, str]] = field(default_factory=list)

    def publish(self) -> int:
        """Append the batch and commit it; the bytes appended."""
        marker = read_marker(self.target) or {"hash": None, "length": 0}
        committed = int(marker.get("length") or 0)
        parts = sorted(p for p in self.staging.iterdir() if p.name.startswith("part-"))
        fd = os.open(self.target, os.O_RDWR | os.O_CREAT, 0o644)
        with os.fdopen(fd, "r+b") as out:
            size = os.fstat(fd).st_size
            if size > committed:
                logger.warning(
                    "%s: cutting %d bytes beyond the committed length %d (an append that did not commit)",
                    self.target,
                    size - committed,
                    committed,
                )
                out.truncate(committed)
            elif size < committed:
                # Shortened by someone else: there is nothing to cut; append after what is there.
                logger.warning("%s is shorter (%d) than it was committed (%d)", self.target, size, committed)
                committed = size
            out.seek(committed)
            for part in parts:
                with open(part, "rb") as staged:
                    shutil.copyfileobj(staged, out, 8 << 20)
            out.flush()
            os.fsync(out.fileno())
            length = out.tell()
        commit_marker(
            self.target,
            {
                "hash": self.delivery.hash,
                "length": length,
                "batch": self.delivery.batch_id,
                "generation": self.delivery.generation,
                "writer": f"{self.delivery.pipeline_id}:{self.delivery.destination_id}",
            },
        )
        shutil.rmtree(self.staging, ignore_errors=True)
        return length - committed

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def stage_append(
    records: DataFrame, target: str | Path, delivery: Delivery, record_format: RecordFormat | None = None
) -> AppendedFile:
    """Write ``records`` as lines (OpenCDC JSON, or ``record_format``) into a hidden staging dir beside
    ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if read_marker(target) is None:
        # The file as found (absent, or a user's file Conduit would append to) is the committed start,
        # so a crash during the first append is undone like any other.
        size = target.stat().st_size if target.exists() else 0
        commit_marker(target, {"hash": None, "length": size})
    for stale in target.parent.glob(f".{target.name}._tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a former attempt's, which never published
    staging = target.parent / f".{target.name}._tmp-{delivery.generation}-{delivery.batch_id:012d}"
    # Here, not at the top: a source's Python processes import this module and never write (30 ms).
    from airflow_conduit.engine.connectors.record_format import record_lines

    record_lines(records, record_format).write.text(str(staging))
    return AppendedFile(staging, target, delivery)
