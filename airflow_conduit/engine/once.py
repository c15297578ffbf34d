"""A micro-batch's records computed once: every write, count and DLQ lookup reads the same rows.

Spark evaluates a plan again for each action on it. The engine runs several actions per batch (stage
each destination, find the nacked records, rank them for the DLQ window, stage the DLQ), and each
evaluation would read the source again and call every processor again. A processor is user code: it
calls services that flake and returns random values, so a second evaluation decides differently and
the destinations, the DLQ and the counters disagree (Conduit hands each message to each node once).

``persist`` is not enough: it is a cache, and a lost block (an executor gone, a block evicted) is
recomputed silently, calling the processors again. A local checkpoint stores the rows in the block
managers (memory, spilling to disk) and cuts the lineage: a lost block then fails the action, the
micro-batch fails as transient, and the restart replays it from the offset log as a new attempt. It is
lazy: the batch's first action (a destination's write) computes and stores the rows in the same pass,
not in a job of its own. The batch decides what is stored (engine/batch.py): the records after the
processors when one is not pure, else the source's rows, which cost less to store, or nothing when even
the source gives a batch's rows again identically and one write reads them. In local mode a processor
whose only impure part is the Python it runs per record counts as pure: its mapper keeps what it
yielded for the batch attempt (engine/processors/_memo.py).
"""

from __future__ import annotations

from pyspark.sql import DataFrame


def computed_once(frame: DataFrame) -> DataFrame:
    """``frame`` as rows computed by the first action on the result and read, never recomputed, by
    every later one. Release them with :func:`release`."""
    return frame.localCheckpoint(eager=False)


def release(frame: DataFrame) -> None:
    """Free the stored rows of a frame from :func:`computed_once` now; Spark would free them only once
    the JVM collects the RDD, and a continuous pipeline makes one per batch."""
    frame._jdf.queryExecution().logical().rdd().unpersist(False)
