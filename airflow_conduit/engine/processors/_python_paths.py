"""``custom.python`` ``path`` on the executors: its Python files travel with the job.

On a cluster the directory a pipeline names may exist on the driver's machine only. Before the query
starts, the Python files under it are zipped and added with ``addPyFile``, which puts the zip on the
import path of every Python worker. Where the directory does exist, it comes first on ``sys.path``
(:func:`.custom_python.load_function`), so both find the same module.
"""

from __future__ import annotations

import hashlib
import logging
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from airflow_conduit.config.model import PipelineConfig
from airflow_conduit.config.settings import CustomPythonSettings

logger = logging.getLogger("airflow_conduit.custom_python")

MAX_SHIPPED_BYTES = 64 << 20
"""Python files beyond this under one ``path`` are not shipped (a virtualenv under it, say)."""


def ship_function_paths(spark: SparkSession, pipeline: PipelineConfig, into: Path) -> list[Path]:
    """Zip and add the ``path`` of every ``custom.python`` processor; the zips (in ``into``)."""
    paths = {
        proc.settings.path
        for processors in [pipeline.processors, *(c.processors for c in pipeline.connectors)]
        for proc in processors
        if isinstance(proc.settings, CustomPythonSettings) and proc.settings.path
    }
    archives = [zip_python_files(Path(path), into) for path in sorted(paths)]
    shipped = [archive for archive in archives if archive is not None]
    for archive in shipped:
        # Spark ignores a path it was given before (its documented rule); the name carries a hash of
        # the content, so a changed module gets a new path and is added again on the next run.
        spark.sparkContext.addPyFile(str(archive))
    return shipped


def zip_python_files(directory: Path, into: Path, limit: int = MAX_SHIPPED_BYTES) -> Path | None:
    """The ``*.py`` files under ``directory`` (not hidden, no ``__pycache__``), zipped into ``into``;
    None when they add up to more than ``limit`` bytes."""
    files = sorted(
        f
        for f in directory.rglob("*.py")
        if not any(part.startswith((".", "__pycache__")) for part in f.relative_to(directory).parts)
    )
    size = sum(f.stat().st_size for f in files)
    if size > limit:
        logger.warning(
            "custom.python path %s holds %.0f MB of Python files: not shipped to the executors, so it "
            "must exist at the same place on every worker (point `path` at the functions' own directory)",
            directory,
            size / 2**20,
        )
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(directory).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    archive = into / f"{directory.name}-{digest.hexdigest()[:16]}.zip"
    if not archive.exists():
        into.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(f"_{archive.name}")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zipped:
            for f in files:
                zipped.write(f, f.relative_to(directory).as_posix())
        partial.replace(archive)
    return archive
