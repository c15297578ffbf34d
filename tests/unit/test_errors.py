"""Classifying how a run ended: exit codes, and Spark failures no processor classified."""

from __future__ import annotations

import traceback

import pytest

from airflow_conduit.engine.job import classify_failure
from airflow_conduit.errors import FatalError, PipelineError, TransientError, classify_exit_code


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


def _worker_traceback(error: Exception) -> str:
    """The text a Python worker sends the driver for ``error``: Spark wraps the formatted traceback."""
    try:
        raise error
    except Exception:
        formatted = traceback.format_exc()
    return (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted due to stage failure: "
        f"Task 0 in stage 3.0 failed: org.apache.spark.api.python.PythonException: {formatted}\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException"
    )


@pytest.mark.parametrize("kind", ["transient", "fatal"])
def test_a_connector_error_raised_on_an_executor_keeps_its_code(kind):
    # An S3 read failing inside a task names no source in Spark's text: the code comes from the error.
    cls = TransientError if kind == "transient" else FatalError
    text = _worker_traceback(cls("s3 source: reading objects: S3 unreachable", code="source_failed"))
    assert classify_failure(RuntimeError(text)) == PipelineError(
        kind, "source_failed", "s3 source: reading objects: S3 unreachable"
    )
    # A user's error without a code: the engine's own guess, as before.
    plain = classify_failure(RuntimeError(_worker_traceback(cls("service down"))))
    assert (plain.kind, plain.code, plain.message) == (kind, "spark_failed", "service down")
