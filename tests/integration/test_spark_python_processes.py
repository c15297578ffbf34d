"""The engine's session starts Spark's Python processes fast (engine/python_startup.py, session.py):
its workers import pyspark from the installed package, and it skips Spark's search for installed data
sources."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark
import pytest

PACKAGE_INIT = str(Path(pyspark.__file__).parent / "__init__.py")


@pytest.mark.spark
def test_python_workers_import_pyspark_from_its_package(spark):
    def imported_from(_):
        import pyspark as worker_pyspark

        return [worker_pyspark.__file__]

    assert spark.sparkContext.parallelize([0], 1).flatMap(imported_from).collect() == [PACKAGE_INIT]


@pytest.mark.engine
def test_an_installed_pyspark_data_source_is_not_searched_for(tmp_path: Path):
    """Spark would register a ``pyspark_*`` package's ``DefaultSource`` by itself, in a Python process
    of its own at the first data source; the engine's session skips that search."""
    package = tmp_path / "pyspark_conduitprobe"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from pyspark.sql.datasource import DataSource

            class DefaultSource(DataSource):
                @classmethod
                def name(cls):
                    return "conduitprobe"
            """
        )
    )
    probe = textwrap.dedent(
        """
        from airflow_conduit.engine.session import get_session

        spark = get_session("local[1]")
        print(spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists("conduitprobe"))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CONDUIT_SPARK_LOG_LEVEL": "ERROR"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
