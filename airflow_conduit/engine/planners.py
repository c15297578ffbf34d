"""Spark's idle Python planner workers, stopped once, when every query the engine runs has been planned.

Planning a query over a Python data source starts three ``pyspark.daemon`` processes on the driver,
one per planner module below, and each forks a worker that Spark keeps for reuse. No later
micro-batch uses those workers (each stream plans its batches in its own source runner and reads in
``pyspark.worker``), yet they stay up for the whole run. Stopping them took about 140 MiB off the
process tree (PSS, 1M records through ``benchmarks/peers.py``).

Spark discards an idle worker that has died and forks a new one when a later query needs it. The
daemons stay: Spark tells a daemon about every worker it discards, and a query fails if that daemon is
gone (seen: ``IOException: Stream closed`` in ``PythonWorkerFactory.stopWorker``). A daemon ignores
``SIGCHLD``, so the workers it forked leave no zombie that Spark would take for a live worker.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

logger = logging.getLogger("airflow_conduit.engine")

PLANNER_MODULES = (
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
)
EXIT_WAIT_SECONDS = 2.0


class _Run(Protocol):
    query: StreamingQuery | None


class PlanningRuns:
    """The runs of this process whose queries may still plan; the planners stop when none is left.

    A run is added as it starts and removed once every source of it has planned its read (its query
    has then asked the planners all it will), when it ends, or when its query is found stopped.

    The workers are stopped once per process. A later query in the same driver (a restart after a
    transient failure, the next test) forks new ones and keeps them: forking them for every query
    cost each query start 0.3-0.4 s (11 pipeline tests took 30.8-32.3 s against 27.4-27.6 s).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._planning: set[_Run] = set()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        """Whether this process has stopped its planner workers; it does so once."""
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
                stopped = stop_planner_workers(spark)
            except Exception:  # only memory is at stake: never fail a batch for it
                logger.debug("could not stop Spark's idle Python planner workers", exc_info=True)
                return
        if stopped:
            logger.debug("stopped %d idle Spark Python planner worker(s)", stopped)

    def ended(self, run: _Run) -> None:
        with self._lock:
            self._planning.discard(run)


PLANNING = PlanningRuns()


def reads_its_source(batch: DataFrame) -> bool:
    """Whether a micro-batch reads its source. Spark plans a Python source's read once per query, when
    the first batch with data for it builds its RDD: ``foreachBatch`` has done that before it calls the
    engine, and here it is only looked up (no job runs)."""
    return bool(batch._jdf.queryExecution().toRdd().getNumPartitions() > 0)


def stop_planner_workers(spark: SparkSession) -> int:
    """Stop the workers of the driver's planner daemons; how many were stopped."""
    jvm: Any = spark._jvm
    workers = []
    for daemon in jvm.java.lang.ProcessHandle.current().children().iterator():
        command = str(daemon.info().commandLine().orElse(""))
        if "pyspark.daemon" in command and any(module in command for module in PLANNER_MODULES):
            workers.extend(daemon.children().iterator())
    for worker in workers:
        worker.destroyForcibly()
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    while any(worker.isAlive() for worker in workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(workers)
