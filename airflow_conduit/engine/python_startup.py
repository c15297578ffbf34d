"""How fast Spark's Python processes start; no pyspark here, so the Airflow side can use it.

Spark starts a Python process for each part of a query it hands to Python: one to look up the
installed Python data sources, one to create a source's reader, one to plan its partitions, one to
host a stream's reader for the query, and the daemon that forks the workers. It puts the
``pyspark.zip`` bundled inside the ``pyspark`` package first on their ``PYTHONPATH``, so each of them
imported pyspark from that zip, compiling every module from source: 0.41-0.46 s an import, against
0.07-0.11 s from the installed package's cached bytecode (measured on this project's machine).

:data:`WORKER_SITE` holds a ``sitecustomize`` module that, where the zip is the one inside an
installed ``pyspark`` package on the same path, removes it from ``sys.path``: the process imports the
same files from the package itself. :func:`with_worker_site` puts it on a ``PYTHONPATH`` that Spark
passes on to these processes. (The first of those processes, the search for installed data sources,
the engine skips: :func:`~airflow_conduit.engine.session.get_session`.)
"""

from __future__ import annotations

import os
from pathlib import Path

WORKER_SITE = Path(__file__).with_name("worker_site")
"""The directory of the ``sitecustomize`` module that Spark's Python processes run at start."""


def with_worker_site(python_path: str | None) -> str:
    """``python_path`` (a ``PYTHONPATH`` value) with :data:`WORKER_SITE` first, once."""
    entries = [entry for entry in (python_path or "").split(os.pathsep) if entry]
    site = str(WORKER_SITE)
    return os.pathsep.join([site, *(entry for entry in entries if entry != site)])
