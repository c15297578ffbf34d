"""Spark's idle Python planners, stopped once, when every query the engine runs has been planned.

Planning a query over a Python data source starts a ``pyspark.daemon`` process on the driver per
planner module below (the engine's session skips the first, the search for installed data sources:
:func:`~airflow_conduit.engine.session.skip_data_source_lookup`), and each forks a worker that Spark
keeps for reuse. No later
micro-batch uses them (each stream plans its batches in its own source runner and reads in
``pyspark.worker``), yet they stay up for the whole run: about 250 MiB of the process tree (PSS, 1M
records through ``benchmarks/peers.py``), 110 MiB of it the daemons.

Each planner has its own ``PythonWorkerFactory``; its ``stop()`` ends the idle workers and the daemon
the way Spark itself does at shutdown, and a later query that plans starts a new daemon through it.
Killing the processes from outside is not enough: Spark then writes to the dead daemon's stdin when
it discards a worker, and the next query fails (seen: ``IOException: Stream closed``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from airflow_conduit.engine.jvm import private_field

logger = logging.getLogger("airflow_conduit.engine")

PLANNER_MODULES = (
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
)


class _Run(Protocol):
    query: StreamingQuery | None


class PlanningRuns:
    """The runs of this process whose queries may still plan; the planners stop when none is left.

    A run is added as it starts and removed once every source of it has planned its read (its query
    has then asked the planners all it will), when it ends, or when its query is found stopped.

    The planners are stopped once per process. A later query in the same driver (a restart after a
    transient failure, the next test) starts new ones and keeps them: forking new workers for every
    query cost each query start 0.3-0.4 s (11 pipeline tests took 30.8-32.3 s against 27.4-27.6 s).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._planning: set[_Run] = set()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        """Whether this process has stopped its planners; it does so once."""
        return self._stopped

    def started(self, run: _Run) -> None:
        with self._lock:
            self._planning.add(run)

    def waits_for(self, run: _Run) -> bool:
        with self._lock:
            return not self._stopped and run in self._planning

    def planned(self, spark: SparkSession, run: _Run) -> None:
        with self._lock:
            if self._stopped or run not in self._planning:
                return
            self._planning.discard(run)
            # A run left behind by a caller that never waited for it must not keep the planners up.
            self._planning = {r for r in self._planning if r.query is None or r.query.isActive}
            if self._planning:
                return
            self._stopped = True
            try:
                stopped = stop_planners(spark)
            except Exception:  # only memory is at stake: never fail a batch for it
                logger.debug("could not stop Spark's idle Python planners", exc_info=True)
                return
        if stopped:
            logger.debug("stopped %d idle Spark Python planner(s) and their workers", stopped)

    def ended(self, run: _Run) -> None:
        with self._lock:
            self._planning.discard(run)


PLANNING = PlanningRuns()


def reads_its_source(batch: DataFrame) -> bool:
    """Whether a micro-batch reads its source. Spark plans a Python source's read once per query, when
    the first batch with data for it builds its RDD: ``foreachBatch`` has done that before it calls the
    engine, and here it is only looked up (no job runs)."""
    return bool(batch._jdf.queryExecution().toRdd().getNumPartitions() > 0)


def stop_planners(spark: SparkSession) -> int:
    """Stop the driver's planner daemons and their idle workers; how many planners were stopped.

    The factories are kept in a private field of ``SparkEnv``, read here by reflection (the Spark
    version is pinned); ``PythonWorkerFactory.stop()`` itself is public.
    """
    jvm: Any = spark._jvm
    workers = private_field(jvm.org.apache.spark.SparkEnv.get(), "pythonWorkers")
    factories = workers.toList().iterator()  # a copy: a query may add a factory meanwhile
    stopped = 0
    while factories.hasNext():
        entry = factories.next()
        if str(entry._1().workerModule()) in PLANNER_MODULES:
            entry._2().stop()
            stopped += 1
    return stopped
