"""Spark's block-manager cleanup pools, capped at a few threads instead of 100 each.

Every micro-batch leaves broadcasts and shuffles that Spark's ``ContextCleaner`` removes later, one
message each to the block manager's RPC endpoints. Those handle the removals in two pools that Spark
builds with a core and a maximum of 100 threads over an unbounded queue
(``ThreadUtils.newDaemonCachedThreadPool``, both sizes hard-coded): a pool below its core size starts
a new thread for every task, even with idle threads at hand, so a long run's driver climbs to 200
more threads (64 at 5 s, 249 at 73 s of a 10M-record run, 155 of them in these pools), each with its
stack and its share of the C allocator's arenas. The cap took about 13 MiB off a 10M-record run's
peak (medians, alternating runs); the driver JVM still grows by its JIT's code and heap over a long
run (``benchmarks/README.md``).

With the core size lowered, the unbounded queue takes the tasks the core threads are busy with, and
the pool never grows past it. No task waits for a removal (Spark's cleaner thread and
``destroy(blocking=True)`` do): the removals queue a little longer instead of running 100 at a time.

The pools are private fields of the endpoints, read here by reflection (the Spark version is pinned);
``ThreadPoolExecutor.setCorePoolSize`` itself is public. The driver's own endpoints only: an
executor's storage endpoint lives in its own JVM.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession

from airflow_conduit.engine.jvm import private_field

logger = logging.getLogger("airflow_conduit.engine")

CLEANUP_THREADS = 2
"""Threads each pool keeps at most."""

POOL_FIELDS = {
    "org.apache.spark.storage.BlockManagerStorageEndpoint": "asyncThreadPool",
    "org.apache.spark.storage.BlockManagerMasterEndpoint": "askThreadPool",
}
"""The endpoint classes and the field of each that holds its pool."""


def cap_cleanup_pools(spark: SparkSession, threads: int = CLEANUP_THREADS) -> int:
    """Cap the driver's block-manager cleanup pools at ``threads`` each; how many pools were capped.

    Never fails the run: only memory is at stake, so a Spark whose fields differ keeps its pools.
    """
    try:
        jvm: Any = spark._jvm
        dispatcher = private_field(jvm.org.apache.spark.SparkEnv.get().rpcEnv(), "dispatcher")
        endpoints = private_field(dispatcher, "endpointRefs").keySet().toArray()
        capped = 0
        for endpoint in endpoints:
            field_name = POOL_FIELDS.get(str(endpoint.getClass().getName()))
            if field_name is not None:
                private_field(endpoint, field_name).setCorePoolSize(threads)
                capped += 1
    except Exception:
        logger.debug("could not cap Spark's block-manager cleanup pools", exc_info=True)
        return 0
    return capped
