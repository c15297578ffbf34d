"""Fail the image build when the installed versions are not the ones the image is meant to carry.

``python docker/check_versions.py AIRFLOW_VERSION SPARK_VERSION``: Airflow is the base image's, and
pyspark, pyspark-client and the Spark jars all carry ``SPARK_VERSION`` (pyspark-client installs into the
same package as pyspark; a mismatch breaks every Python UDF, DESIGN.md §5).
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path


def problems(airflow_version: str, spark_version: str) -> list[str]:
    import airflow
    import pyspark

    import airflow_conduit  # noqa: F401  (installed and importable)

    found = []
    if airflow.__version__ != airflow_version:
        found.append(f"apache-airflow is {airflow.__version__}, not {airflow_version}")
    for name, installed in (
        ("pyspark", version("pyspark")),
        ("pyspark-client", version("pyspark-client")),
        ("pyspark.__version__", pyspark.__version__),
    ):
        if installed != spark_version:
            found.append(f"{name} is {installed}, not {spark_version}")
    jars = Path(pyspark.__file__).parent / "jars"
    if not list(jars.glob(f"spark-core_*-{spark_version}.jar")):
        cores = sorted(p.name for p in jars.glob("spark-core_*.jar"))
        found.append(f"no spark-core jar of {spark_version} in {jars}: {cores}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check_versions.py AIRFLOW_VERSION SPARK_VERSION", file=sys.stderr)
        return 2
    found = problems(*argv)
    for problem in found:
        print(f"version mismatch: {problem}", file=sys.stderr)
    if not found:
        print(f"airflow {argv[0]}, spark {argv[1]}: python and jars agree")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
