"""Fixtures of the scale-out tests: a Spark standalone cluster for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from spark_standalone import SparkCluster, standalone_cluster


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A master and one worker on loopback, free ports; stopped after the module, also on failure."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster
