"""OpenCDC JSON-lines files, written exactly once: the file destination's and the DLQ store's writer.

A micro-batch is written by Spark under ``_tmp-PREFIX/`` (invisible to readers of ``*.jsonl``) together
with ``_delivery.json``, which names the delivery and the files it will publish. Publishing is:

1. rename ``_tmp-PREFIX`` to ``_commit-PREFIX``: one atomic rename, the commit point;
2. move each part to its final name ``PREFIX-PART.jsonl``;
3. replace the writer's marker ``.delivery-PIPELINE-DESTINATION.json`` with the delivery's hash;
4. remove ``_commit-PREFIX``.

A crash after step 1 leaves a ``_commit-`` directory that :func:`delivered` rolls forward (steps 2-4)
before it answers, so a committed delivery is never half visible for long and never lost; a crash
before step 1 leaves only a ``_tmp-`` directory, which the replay overwrites. Names sort in delivery
order: ``GENERATION-BATCH-PART`` (the generation names the checkpoint, so a fresh checkpoint never
overwrites older output).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.errors import FatalError
from airflow_conduit.files import write_atomic
from airflow_conduit.state import path_segment

if TYPE_CHECKING:
    from airflow_conduit.config.settings.record_format import RecordFormat

MANIFEST = "_delivery.json"


def _marker(directory: Path, delivery: Delivery) -> Path:
    writer = path_segment(f"{delivery.pipeline_id}-{delivery.destination_id}")
    return directory / f".delivery-{writer}.json"


def _finish(commit_dir: Path) -> list[Path]:
    """Steps 2-4 of publishing a committed batch directory; safe to repeat after a crash."""
    manifest = json.loads((commit_dir / MANIFEST).read_text())
    directory = commit_dir.parent
    published = []
    for part, target in manifest["files"]:
        source, destination = commit_dir / part, directory / target
        if source.exists():
            os.replace(source, destination)
        published.append(destination)
    write_atomic(directory / manifest["marker"], json.dumps(manifest["delivery"]))
    shutil.rmtree(commit_dir, ignore_errors=True)
    return published


def roll_forward(directory: str | Path) -> None:
    """Finish publishing any batch that was committed when the process died."""
    directory = Path(directory)
    if directory.is_dir():
        for commit_dir in sorted(directory.glob("_commit-*")):
            if (commit_dir / MANIFEST).exists():
                _finish(commit_dir)


def delivered(directory: str | Path, delivery: Delivery) -> bool:
    """Whether ``directory`` already holds ``delivery`` (its marker names the same hash)."""
    directory = Path(directory)
    roll_forward(directory)
    marker = _marker(directory, delivery)
    if not delivery.hash or not marker.exists():
        return False
    return json.loads(marker.read_text()).get("hash") == delivery.hash


@dataclass(frozen=True)
class StagedFiles:
    """A batch written under ``_tmp-...``, not yet visible; :meth:`publish` commits it as above."""

    staging: Path
    commit_dir: Path
    nacks: list[tuple[int, str]] = field(default_factory=list)

    def publish(self) -> list[Path]:
        os.rename(self.staging, self.commit_dir)
        return _finish(self.commit_dir)

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def stage_jsonl(
    records: DataFrame, directory: str | Path, delivery: Delivery, record_format: RecordFormat | None = None
) -> StagedFiles:
    """Write ``records`` as lines (OpenCDC JSON, or ``record_format``) into a hidden staging dir of
    ``directory``."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        # A configuration mistake: retrying cannot help, so it must not look transient.
        raise FatalError(
            f"{directory} exists and is not a directory: the file destination writes a directory of "
            "JSON-lines files there; name a directory, or a path that does not exist yet"
        )
    directory.mkdir(parents=True, exist_ok=True)
    prefix = f"{delivery.generation}-{delivery.batch_id:012d}"
    staging, commit_dir = directory / f"_tmp-{prefix}", directory / f"_commit-{prefix}"
    shutil.rmtree(staging, ignore_errors=True)
    # Imported here for the same reason as in jsonl_file: the source's processes never write.
    from airflow_conduit.engine.connectors.record_format import record_lines

    record_lines(records, record_format).write.text(str(staging))
    parts = sorted(p.name for p in staging.iterdir() if p.name.startswith("part-"))
    files = [(part, f"{prefix}-{int(part.split('-')[1]):05d}.jsonl") for part in parts]
    manifest = {
        "files": files,
        "marker": _marker(directory, delivery).name,
        "delivery": {"hash": delivery.hash, "batch": delivery.batch_id, "generation": delivery.generation},
    }
    (staging / MANIFEST).write_text(json.dumps(manifest))
    return StagedFiles(staging, commit_dir)
