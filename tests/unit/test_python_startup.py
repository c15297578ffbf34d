"""Spark's Python processes import pyspark from its package, not from the zip Spark puts first on their
path (engine/python_startup.py and its ``sitecustomize``): each process started as Spark starts it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark

from airflow_conduit.engine.python_startup import WORKER_SITE, with_worker_site

PACKAGE = Path(pyspark.__file__).parent
BUNDLED_ZIP = PACKAGE / "python" / "lib" / "pyspark.zip"


def started_as_spark_starts_it(python_path: list[Path | str], code: str) -> str:
    """What ``code`` prints in a new interpreter with ``python_path`` as its ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(entry) for entry in python_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_bundled_zip_gives_way_to_the_installed_package() -> None:
    assert BUNDLED_ZIP.is_file()
    where = "import pyspark; print(pyspark.__file__)"
    # As Spark starts them: the zip first, so every module compiles from source.
    assert started_as_spark_starts_it([BUNDLED_ZIP], where).startswith(str(BUNDLED_ZIP))
    assert started_as_spark_starts_it([BUNDLED_ZIP, WORKER_SITE], where) == str(PACKAGE / "__init__.py")


def test_a_zip_outside_an_installed_package_stays(tmp_path: Path) -> None:
    """A Spark distribution's ``$SPARK_HOME/python/lib/pyspark.zip`` is the only pyspark there may be."""
    spark_home_zip = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"
    spark_home_zip.parent.mkdir(parents=True)
    with zipfile.ZipFile(spark_home_zip, "w") as archive:
        archive.writestr("pyspark/__init__.py", "FROM_ZIP = True\n")
    where = "import pyspark; print(getattr(pyspark, 'FROM_ZIP', False))"
    assert started_as_spark_starts_it([spark_home_zip, WORKER_SITE], where) == "True"


def test_a_later_sitecustomize_still_runs(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITE_RAN = True\n")
    ran = "import builtins; print(getattr(builtins, 'OWN_SITE_RAN', False))"
    assert started_as_spark_starts_it([WORKER_SITE, own], ran) == "True"


def test_the_worker_site_goes_first_once() -> None:
    assert with_worker_site(None) == str(WORKER_SITE)
    joined = with_worker_site(os.pathsep.join(["/a", str(WORKER_SITE), "/b"]))
    assert joined.split(os.pathsep) == [str(WORKER_SITE), "/a", "/b"]
    assert with_worker_site(joined) == joined
