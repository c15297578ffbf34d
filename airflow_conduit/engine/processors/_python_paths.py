"""``custom.python`` ``path`` on the executors: its Python files travel with the job.

On a cluster the directory a pipeline names may exist on the driver's machine only. Before the query
starts, the Python files under it are zipped and added with ``addPyFile``, which puts the zip on the
import path of every Python worker. Where the directory does exist, it comes first on ``sys.path``
(:func:`.custom_python.load_function`), so both find the same module.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from airflow_conduit.config.model import PipelineConfig


def ship_function_paths(spark: SparkSession, pipeline: PipelineConfig, into: Path) -> list[Path]:
    """Zip and add the ``path`` of every ``custom.python`` processor; the zips (in ``into``)."""
    paths = {
        str(proc.settings["path"])
        for processors in [pipeline.processors, *(c.processors for c in pipeline.connectors)]
        for proc in processors
        if proc.plugin == "custom.python" and proc.settings.get("path")
    }
    shipped = [zip_python_files(Path(path), into) for path in sorted(paths)]
    for archive in shipped:
        # Spark adds a file name once per session; the name carries a hash of the content, so a changed
        # module is added again on the next run.
        spark.sparkContext.addPyFile(str(archive))
    return shipped


def zip_python_files(directory: Path, into: Path) -> Path:
    """The ``*.py`` files under ``directory`` (not hidden, no ``__pycache__``), zipped into ``into``."""
    files = sorted(
        f
        for f in directory.rglob("*.py")
        if not any(part.startswith((".", "__pycache__")) for part in f.relative_to(directory).parts)
    )
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
