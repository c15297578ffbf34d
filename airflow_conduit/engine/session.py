"""The SparkSession the engine runs in."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.sql import SparkSession

from airflow_conduit.engine.cleanup_pools import cap_cleanup_pools
from airflow_conduit.engine.jvm import ENGINE_CONFS, local_driver_options, scala_object
from airflow_conduit.engine.local_files import use_local_files
from airflow_conduit.engine.python_startup import with_worker_site
from airflow_conduit.engine.sql_functions import register_functions

DEFAULT_MASTER = "local[*]"


def ensure_python_workers() -> None:
    """Spark's Python workers use ``PYSPARK_PYTHON``; without it they start the system python, which
    lacks pyarrow (DESIGN.md §5). Default it to the interpreter running the engine, and let them import
    pyspark from its package rather than from its zip (:mod:`.python_startup`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = with_worker_site(os.environ.get("PYTHONPATH"))
    # A local run needs no network: bind to loopback unless told otherwise.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def get_session(
    master: str | None = None, app_name: str = "airflow-conduit", *, java_options: str | None = None
) -> SparkSession:
    """Get or create the session. ``master=None`` keeps what spark-submit configured, else ``local[*]``.

    :param java_options: the driver's JVM options, instead of :func:`driver_java_options` (only where
        this call starts the JVM)
    """
    ensure_python_workers()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = builder.master(DEFAULT_MASTER)
    options = driver_java_options() if java_options is None else java_options
    builder = builder.config("spark.driver.extraJavaOptions", options)
    for key, value in ENGINE_CONFS.items():
        builder = builder.config(key, value)
    cores = os.cpu_count() or 2
    starts_context = SparkContext._active_spark_context is None
    spark = (
        builder.config("spark.sql.shuffle.partitions", str(max(2, cores)))
        # field.set and friends merge maps: the new value wins.
        .config("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
        .config("spark.ui.showConsoleProgress", "false")
        # OpenCDC JSON carries raw values as base64: one unbroken string, not MIME's 76-column lines.
        .config("spark.sql.chunkBase64String.enabled", "false")
        .config("spark.sql.streaming.stopTimeout", "0")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(os.environ.get("CONDUIT_SPARK_LOG_LEVEL", "ERROR"))
    cap_cleanup_pools(spark)
    skip_data_source_lookup(spark)
    register_functions(spark)
    if starts_context:  # a running context's cached file system may be in use
        use_local_files(spark)
    return spark


def skip_data_source_lookup(spark: SparkSession) -> bool:
    """Skip Spark's search for Python data sources installed as ``pyspark_*`` packages; whether skipped.

    Spark starts a Python process for that search once per JVM, at the first Python data source a
    session registers or reads: 0.7-0.8 s on this project's machine, before the first query. The engine
    registers every data source it reads itself, so the search finds nothing it uses. One that already
    ran is left as it is; a Spark without this internal keeps its search (only time is at stake).
    """
    try:
        jvm: Any = spark._jvm
        manager = scala_object(jvm.org.apache.spark.sql.execution.datasources, "DataSourceManager")
        if manager.dataSourceBuilders().isDefined():
            return False
        empty = scala_object(jvm.scala.collection.immutable, "Map").empty()
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(empty))
    except Py4JError:
        return False
    return True


def driver_java_options(*, class_archive: bool = True) -> str:
    """The JVM options of a driver the engine starts itself (under spark-submit, the submitter's own):
    the engine's log configuration, GC and native heap settings, and the class-data archive when one is built
    (:mod:`.class_archive`)."""
    log_config = Path(__file__).with_name("log4j2.properties")
    return f"-Dlog4j2.configurationFile=file:{log_config} {local_driver_options(class_archive=class_archive)}"


def under_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands the driver its gateway; the master is then its own."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def check_versions(spark: SparkSession) -> tuple[str, str]:
    """The Python and JVM Spark versions; they must agree or every Python UDF fails (DESIGN.md §5)."""
    import pyspark

    return pyspark.__version__, spark.version
