"""Local files without a ``chmod`` process per file: Hadoop's ``file:`` file system with its permission
bits set through java.nio (``LocalFiles`` in ``java/LocalFiles.java``).

Pyspark ships no Hadoop native library, so Hadoop's local file system sets each permission by starting
``chmod``: eleven processes per micro-batch of a file → file or Postgres CDC → file pipeline (the
offset and commit logs and their checksums, the staged file and its checksum, the write's directories),
each forked from the driver's JVM while the batch waits.

Only in local mode (``local`` or ``local[...]``), where the driver's JVM is also the executor: a
cluster's executors would have to load the class from their own class path before their first file
access. The class is added to the class loader of the context's Hadoop configuration (Spark's own
``MutableURLClassLoader``), and the ``file:`` file system the context cached at its start is replaced by
one of these. A context with another ``fs.file.impl`` keeps it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from airflow_conduit.engine.sql_functions import compiled_jar

logger = logging.getLogger("airflow_conduit.engine")

SOURCE = Path(__file__).with_name("java") / "LocalFiles.java"
CLASS_NAME = "org.airflowconduit.LocalFiles"
_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


def use_local_files(spark: SparkSession) -> bool:
    """Make ``file:`` paths of ``spark``'s context use :data:`CLASS_NAME`; whether they now do."""
    context: Any = spark.sparkContext
    if not _LOCAL_MASTER.fullmatch(context.master or ""):
        return False
    conf = context._jsc.hadoopConfiguration()
    current = conf.get("fs.file.impl")
    if current == CLASS_NAME:
        return True
    if current is not None:
        return False  # the user's choice
    jvm: Any = spark._jvm
    loader = conf.getClassLoader()
    if not loader.getClass().getName().endswith("MutableURLClassLoader"):
        return False  # no way to add a jar to it
    try:
        url = jvm.java.io.File(str(compiled_jar(spark, SOURCE, "conduit-local-files"))).toURI().toURL()
        loader.addURL(url)
        loader.loadClass(CLASS_NAME)
    except Py4JError as error:
        logger.debug("local files through Hadoop's own file system: %s", error)
        return False
    conf.set("fs.file.impl", CLASS_NAME)
    # The context cached Hadoop's local file system when it started: closing it drops it from the cache
    # (it stays usable by whoever holds it), and the next lookup makes and caches one of ours.
    root = jvm.java.net.URI.create("file:///")
    filesystems = jvm.org.apache.hadoop.fs.FileSystem
    cached = filesystems.get(root, conf)
    if cached.getClass().getName() != CLASS_NAME:
        cached.close()
    return filesystems.get(root, conf).getClass().getName() == CLASS_NAME
