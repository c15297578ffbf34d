"""Run at the start of each Python process Spark starts for the engine (see ``python_startup.py``).

Where the ``pyspark.zip`` on ``sys.path`` is the one bundled inside an installed ``pyspark`` package
that is itself importable from ``sys.path``, drop the zip: the process then imports the same files
from the package, with their cached bytecode, instead of compiling each from the zip. Any other
``sitecustomize`` later on the path (a distribution's own) still runs after this one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _drop_bundled_pyspark_zip() -> None:
    importable = {os.path.realpath(entry) for entry in sys.path if entry}
    for entry in list(sys.path):
        if os.path.basename(entry) != "pyspark.zip":
            continue
        # <site-packages>/pyspark/python/lib/pyspark.zip: the package three levels up.
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(entry))))
        if (
            os.path.basename(package) == "pyspark"
            and os.path.isfile(os.path.join(package, "__init__.py"))
            and os.path.dirname(package) in importable
        ):
            sys.path.remove(entry)


def _run_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    later = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_drop_bundled_pyspark_zip()
_run_next_sitecustomize()
