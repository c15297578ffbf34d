"""``python -m airflow_conduit.cli``: the same as the ``airflow-conduit`` command."""

from __future__ import annotations

import sys

from airflow_conduit.cli import main

if __name__ == "__main__":
    sys.exit(main())
