"""JVM options for the Spark driver that runs the engine; no pyspark here, so the Airflow side can use it.

Micro-batches reach the driver as Arrow buffers and task results of 0.5-8 MB each. In the 1 MB G1 regions
of Spark's default 1g heap those are humongous objects, allocated straight into the old generation, and
some runs fell into back-to-back concurrent marking cycles (51 in a 34 s run, against 4-9) whose thread
held one of two cores: Postgres batches took 2.66 s instead of 1.85 s. In 16 MB regions they are ordinary
young objects.
"""

from __future__ import annotations

DRIVER_GC_OPTIONS = "-XX:G1HeapRegionSize=16m"
"""For ``spark.driver.extraJavaOptions``: the engine adds it to a driver it starts itself, and
:class:`~airflow_conduit.hooks.conduit.ConduitHook` to the ``spark-submit`` it builds unless the
submission's ``conf`` sets that property."""
