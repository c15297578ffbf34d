"""JVM options for the Spark driver that runs the engine; no pyspark here, so the Airflow side can use it.

Here: the driver's G1 settings, the Spark settings for local files, and where the class-data archive
lives and the options that map it (:mod:`.class_archive` builds it).

The G1 settings:

- Region size: micro-batches reach the driver as Arrow buffers and task results of 0.5-8 MB each. In
  the 1 MB G1 regions of Spark's default 1g heap those are humongous objects, allocated straight into
  the old generation, and some runs fell into back-to-back concurrent marking cycles (51 in a 34 s run,
  against 4-9) whose thread held one of two cores: Postgres batches took 2.66 s instead of 1.85 s. In
  16 MB regions they are ordinary young objects.
- ``GCTimeRatio=4`` (G1's default is 12): G1 grows the heap until collection takes under
  1/(1+ratio) of the time, so with the default a local run's driver filled most of its 1g heap. Letting
  collection take up to 20% kept the driver at 740-770 MB instead of 1,080-1,110 MB (peak PSS, 1M
  records through ``benchmarks/peers.py``), the run's time unchanged within the noise (22.1-23.9 s
  against 22.7-23.1 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

DRIVER_GC_OPTIONS = "-XX:G1HeapRegionSize=16m -XX:GCTimeRatio=4"
"""For ``spark.driver.extraJavaOptions``: the engine adds it to a driver it starts itself, and
:class:`~airflow_conduit.hooks.conduit.ConduitHook` to the ``spark-submit`` it builds unless the
submission's ``conf`` sets that property."""

# Without Hadoop's native library (pyspark ships none), Hadoop's local file system starts a process for
# every permission it sets (`chmod`) and every link it reads (`readlink`, on each FileContext rename):
# about 25 per micro-batch, 4-5 ms each. These settings avoid half of them. (Hadoop's RawLocalFileSystem
# as `fs.file.impl` would avoid the `.crc` files' too, but breaks `SparkContext.textFile`.)
LOCAL_FILE_CONFS: dict[str, str] = {
    # The checkpoint's offset and commit logs through FileSystem, not FileContext: the same
    # write-then-rename, with no `readlink` per rename (walCommit and commitOffsets 30-37 ms -> 4-5 ms).
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    # The engine publishes its own staged files; Spark's `_SUCCESS` (two files) marks nothing here.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}
"""Spark settings of every session the engine runs in: :func:`~airflow_conduit.engine.session.get_session`
sets them, and :class:`~airflow_conduit.hooks.conduit.ConduitHook` passes them to ``spark-submit``."""

ARCHIVE_ENV = "AIRFLOW_CONDUIT_CLASS_ARCHIVE"
"""``off``: start without the archive; a path: use that archive file instead of the cached one."""
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A JVM that cannot map the archive (another JVM, other jars) warns on its output: not ours to show."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/airflow-conduit`` (``~/.cache/airflow-conduit`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "airflow-conduit"


def _java() -> Path | None:
    """The ``java`` that ``spark-submit`` starts: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def _spark_jars() -> Path | None:
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return jars if jars.is_dir() else None


def archive_path() -> Path | None:
    """Where the archive for this JVM and these Spark jars lives (whether built or not); ``None`` when
    either cannot be found."""
    java, jars = _java(), _spark_jars()
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    for part in [java, *sorted(jars.glob("*.jar"))]:
        stat = part.stat()
        digest.update(f"{part}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return cache_dir() / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def archive_options() -> str:
    """The driver's JVM options that map the archive, or ``""`` when there is none to map."""
    chosen = os.environ.get(ARCHIVE_ENV, "")
    if chosen == "off":
        return ""
    path = Path(chosen) if chosen else archive_path()
    # A missing file would turn off the JDK's own archive too: name the file only when it is there.
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"
