"""The engine's entry point under ``spark-submit``: ``spark-submit .../airflow_conduit/cli/spark_submit.py
FILE [run options]`` runs ``airflow-conduit run FILE [run options]`` in the Spark driver.

A module of its own so that the engine never imports the CLI (spark-submit runs a file, not a module).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``airflow-conduit run`` with spark-submit's application arguments."""
    from airflow_conduit.cli import main as cli_main

    return cli_main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
