"""The engine's entry point under ``spark-submit``: ``spark-submit .../airflow_conduit/cli/spark_submit.py
FILE [run options]`` runs ``airflow-conduit run FILE [run options]`` in the Spark driver.

A module of its own so that the engine never imports the CLI (spark-submit runs a file, not a module).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``airflow-conduit run`` with spark-submit's application arguments."""
    from airflow_conduit.cli import main as cli_main

    return cli_main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    # Run as a file, so Python put this directory first on sys.path: its modules (run, status, records)
    # must not shadow top-level modules of the same name for the rest of the driver.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.exit(main())
