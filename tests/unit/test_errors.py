"""Classifying how a run ended: exit codes, and Spark failures no processor classified."""

from __future__ import annotations

import pytest

from airflow_conduit.engine.job import classify_failure
from airflow_conduit.errors import PipelineError, classify_exit_code


@pytest.mark.parametrize(
    ("code", "kind"), [(0, None), (1, "fatal"), (2, "fatal"), (75, "transient"), (137, "transient")]
)
def test_exit_codes(code, kind):
    # Anything unexpected (a killed JVM: 137) may succeed on restart, as Conduit treats unknown errors.
    assert classify_exit_code(code) == kind


def test_unclassified_spark_failures_are_transient():
    source = classify_failure(RuntimeError("[STREAM_FAILED] in conduit_file: file vanished\nstack"))
    assert source == PipelineError(
        "transient", "source_failed", "[STREAM_FAILED] in conduit_file: file vanished"
    )
    other = classify_failure(RuntimeError("executor lost"))
    assert (other.kind, other.code, other.exit_code) == ("transient", "spark_failed", 75)
