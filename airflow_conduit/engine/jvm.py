"""JVM options for the Spark driver that runs the engine; no pyspark here, so the Airflow side can use it.

Here: the driver's GC settings, the Spark settings of every session the engine runs in, and where the
class-data archive lives and the options that map it (:mod:`.class_archive` builds it); and
:func:`private_field` and :func:`scala_object`, how the engine reads the Spark internals it tunes
(:mod:`.planners`, :mod:`.cleanup_pools`, :mod:`.session`) through py4j.

The GC settings (``DRIVER_GC_OPTIONS``), each measured on 1M and 10M records through
``benchmarks/peers.py`` (peak PSS of the process tree, 2 cores, 24 GB of memory):

- The parallel collector. Under G1 the driver JVM peaked at 700-760 MiB at 1M records even with
  ``GCTimeRatio=4``; under the parallel collector at 500-530 MiB, and the run took 19.3-20 s against
  20.6-20.9 s. At 1,000 records/s its end-to-end latency was a little higher (file -> file p99 0.54-0.55 s
  against 0.46-0.47 s, p50 0.32-0.34 s against 0.31-0.32 s; the goal is 1 s and 0.5 s). It has no
  humongous objects: the 16 MB G1 regions once needed for the driver's 0.5-8 MB Arrow buffers and task
  results do not apply.
- ``GCTimeRatio=4`` (the parallel collector's default is 99): the heap grows only once collection
  takes over 20% of the time, rather than 1%.
- ``-Xms128m``: the initial heap is otherwise 1/64 of the machine's memory (376 MB here), whose old
  generation then filled with short-lived data for as long as a run lasted: 10M records peaked 17-20%
  above 1M (JVM 712 against 500-530 MiB). From 128 MB the heap grows as it needs to: over 10M records
  the driver JVM grows by about 100 MiB (heap capacity 50, JIT code 25, threads 18) while the heap left
  after each full collection stays at 72-77 MB. Fixing the young generation's size instead
  (``-XX:-UseAdaptiveSizePolicy -Xmn96m``) made 1M records take 96 s, in a thousand full collections.
- The C library's heap trimmed every second (``TrimNativeHeapInterval``, :func:`driver_jvm_options`):
  glibc keeps what the JVM frees (the JIT's arenas, Spark's and Netty's native buffers) rather than
  giving it back, so a longer run kept more of it. Driver JVM at 10M records 567-585 MiB against
  598-615 without; at 1M no difference; the same run times.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import Any

DRIVER_GC_OPTIONS = "-XX:+UseParallelGC -XX:GCTimeRatio=4 -Xms128m"
"""For ``spark.driver.extraJavaOptions``: the engine adds it to a driver it starts itself, and
:class:`~airflow_conduit.hooks.conduit.ConduitHook` to the ``spark-submit`` it builds unless the
submission's ``conf`` sets that property."""

ENGINE_CONFS: dict[str, str] = {
    # The first two are for local files. Without Hadoop's native library (pyspark ships none), Hadoop's
    # local file system starts a process for every permission it sets (`chmod`) and every link it reads
    # (`readlink`, on each FileContext rename): about 25 per micro-batch, 4-5 ms each. These avoid half
    # of them; in local mode the engine's own `file:` file system avoids the `chmod`s (local_files.py).
    #
    # The checkpoint's offset and commit logs through FileSystem, not FileContext: the same
    # write-then-rename, with no `readlink` per rename (walCommit and commitOffsets 30-37 ms -> 4-5 ms).
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    # The engine publishes its own staged files; Spark's `_SUCCESS` (two files) marks nothing here.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    # Spark's Python workers allocate Arrow buffers from the C library's allocator, which gives freed
    # memory back, rather than pyarrow's jemalloc, which keeps it: the two workers reading a file source
    # peaked at 149-155 MiB instead of 193-198 (PSS, 1M records through benchmarks/peers.py), in the
    # same time within the noise.
    "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system",
}
"""Spark settings of every session the engine runs in (local files, Python workers):
:func:`~airflow_conduit.engine.session.get_session` sets them, and
:class:`~airflow_conduit.hooks.conduit.ConduitHook` passes them to ``spark-submit``."""

ARCHIVE_ENV = "AIRFLOW_CONDUIT_CLASS_ARCHIVE"
"""``off``: start without the archive; a path: use that archive file instead of the cached one."""
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A JVM that cannot map the archive (another JVM, other jars) warns on its output: not ours to show."""
_QUIET_AOT = "-Xlog:aot=off -Xlog:cds=off"
"""The same for an AOT cache, which a JVM that cannot use it also skips (``-XX:AOTMode=auto``)."""


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


def uses_aot_cache(version: tuple[int, int, int] | None) -> bool:
    """Whether a JVM of ``version`` gets an AOT cache (Java 25+) rather than a CDS archive.

    The AOT cache (JEP 483, 514, 515) keeps what the CDS archive keeps and also the classes linked and the
    methods' profiles from the run that made it, so the JIT compiles the hot paths of a cold first
    micro-batch sooner. Made in one step at the recording JVM's exit (``-XX:AOTCacheOutput``, Java 25)."""
    return version is not None and version[0] >= 25


def archive_inputs() -> tuple[Path, Path] | None:
    """The ``java`` and the Spark jars directory an archive is built for here; ``None`` when either
    cannot be found."""
    java, jars = _java(), _spark_jars()
    return None if java is None or jars is None else (java, jars)


def archive_path() -> Path | None:
    """Where the archive for this machine's JVM and Spark jars (:func:`archive_inputs`) lives, whether
    built or not; ``None`` when either cannot be found."""
    inputs = archive_inputs()
    return None if inputs is None else archive_file(*inputs)


def archive_file(java: Path, jars: Path) -> Path:
    """Where the archive for ``java`` and the Spark jars in ``jars`` lives, named after a digest of
    both. ``.aot`` for an AOT cache, ``.jsa`` for a CDS archive."""
    digest = hashlib.sha256()
    for part in [java, *sorted(jars.glob("*.jar"))]:
        stat = part.stat()
        digest.update(f"{part}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    suffix = "aot" if uses_aot_cache(java_version(java)) else "jsa"
    return cache_dir() / f"spark-driver-{digest.hexdigest()[:16]}.{suffix}"


def archive_options() -> str:
    """The driver's JVM options that map the archive, or ``""`` when there is none to map."""
    chosen = os.environ.get(ARCHIVE_ENV, "")
    if chosen == "off":
        return ""
    path = Path(chosen) if chosen else archive_path()
    # A missing file would turn off the JDK's own archive too: name the file only when it is there.
    if path is None or not path.is_file():
        return ""
    if uses_aot_cache(java_version()):
        return f"-XX:AOTCache={path} {_QUIET_AOT}"
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def record_options(target: Path) -> str:
    """The JVM options that make a driver write the archive for its JVM to ``target`` as it exits."""
    if uses_aot_cache(java_version()):
        return f"-XX:AOTCacheOutput={target}"
    return f"-XX:ArchiveClassesAtExit={target}"


TRIM_NATIVE_HEAP_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:TrimNativeHeapInterval=1000"
"""Give the C library's freed memory back every second. The switch is experimental in the builds that
first had it (17.0.9, 21.0.1), hence the unlock; a product switch from 17.0.11 and 21.0.3."""


def java_version(java: Path | None = None) -> tuple[int, int, int] | None:
    """``(feature, interim, update)`` of ``java`` (default: the one ``spark-submit`` starts), from its
    installation's ``release`` file; ``None`` when that cannot be read. No JVM is started."""
    java = java or _java()
    if java is None:
        return None
    try:
        release = (java.parent.parent / "release").read_text()
    except OSError:
        return None
    match = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?(?:\.(\d+))?', release, re.MULTILINE)
    if match is None:
        return None
    feature, interim, update = (int(part or 0) for part in match.groups())
    return feature, interim, update


def trims_native_heap(version: tuple[int, int, int] | None) -> bool:
    """Whether a JVM of ``version`` knows ``TrimNativeHeapInterval`` (JDK 22, backported to 21.0.1 and
    17.0.9): an unknown option stops a JVM from starting, so anything else goes without it."""
    if version is None:
        return False
    feature, _, update = version
    return feature >= 22 or (feature == 21 and update >= 1) or (feature == 17 and update >= 9)


def driver_jvm_options(version: tuple[int, int, int] | None = None) -> str:
    """:data:`DRIVER_GC_OPTIONS`, and the native heap's trimming where the driver's JVM (default: this
    machine's, :func:`java_version`) knows it."""
    if trims_native_heap(version or java_version()):
        return f"{DRIVER_GC_OPTIONS} {TRIM_NATIVE_HEAP_OPTIONS}"
    return DRIVER_GC_OPTIONS


def local_driver_options(*, class_archive: bool = True) -> str:
    """The JVM options of a driver that runs on this machine (the engine's own session, or
    ``spark-submit`` in client mode): :func:`driver_jvm_options`, and the class archive's where one is
    built for this machine's java and Spark jars (:func:`archive_options`)."""
    options = driver_jvm_options()
    archive = archive_options() if class_archive else ""
    return f"{options} {archive}" if archive else options


def private_field(java_object: Any, name: str) -> Any:
    """The value of a private field of a Java object reached through py4j, by reflection (the Spark
    version is pinned, so the names are checked once, with ``javap``)."""
    field = java_object.getClass().getDeclaredField(name)
    field.setAccessible(True)
    return field.get(java_object)


def scala_object(package: Any, name: str) -> Any:
    """The Scala ``object`` ``name`` of a py4j ``package`` view (its class ``name$``, field ``MODULE$``)."""
    return getattr(getattr(package, f"{name}$"), "MODULE$")
