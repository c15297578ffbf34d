"""The driver's block-manager cleanup pools stay at a few threads however many broadcasts Spark removes,
and the removals still complete (``engine/cleanup_pools.py``)."""

from __future__ import annotations

import pytest

from airflow_conduit.engine.cleanup_pools import CLEANUP_THREADS

pytestmark = pytest.mark.spark

POOL_THREAD_NAMES = ("block-manager-storage-async-thread-pool", "block-manager-ask-thread-pool")


def pool_threads(spark) -> dict[str, int]:
    """The driver JVM's live threads of each cleanup pool."""
    counts = dict.fromkeys(POOL_THREAD_NAMES, 0)
    for thread in spark._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray():
        name = str(thread.getName())
        for prefix in POOL_THREAD_NAMES:
            if name.startswith(prefix):
                counts[prefix] += 1
    return counts


def test_removing_many_broadcasts_keeps_each_cleanup_pool_small(spark):
    jvm = spark._jvm
    block_manager = jvm.org.apache.spark.SparkEnv.get().blockManager()
    removed = []
    # Spark's pools start a thread per task below their core size of 100: without the cap, these 30
    # removals left 100 threads in each pool.
    for number in range(30):
        broadcast = spark.sparkContext.broadcast({"number": number})
        # A job that reads it, so that the removal has a block to remove.
        read = spark.sparkContext.parallelize([0], 1).map(lambda _, held=broadcast: held.value["number"])
        assert read.collect() == [number]
        block = jvm.org.apache.spark.storage.BroadcastBlockId(broadcast._jbroadcast.id(), "")
        broadcast.destroy(blocking=True)  # waits for the block managers' answer, through both pools
        removed.append(block_manager.getStatus(block).isDefined())
    assert removed == [False] * 30
    counts = pool_threads(spark)
    assert all(count <= CLEANUP_THREADS for count in counts.values()), counts
    assert any(counts.values()), counts  # the removals did run in these pools
