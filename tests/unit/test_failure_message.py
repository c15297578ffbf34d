"""The error message ``classify_failure`` puts in the exit payload: the root cause, not Spark's wrapper.

The texts in ``spark_failures/`` are ``str()`` of real ``StreamingQueryException``s from local Spark 4.2
(``awaitTermination`` of a query that failed): a Python error in the foreachBatch function (a file
destination whose directory cannot be made), a Python UDF failing on an executor, with and without a
foreachBatch function around it, and a Java error (``raise_error``), once with
``spark.sql.pyspark.jvmStacktrace.enabled``. ``tests/integration/test_python_error_in_payload.py``
raises one through the real engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_conduit.engine.job import classify_failure

TEXTS = Path(__file__).resolve().parent / "spark_failures"


def failure(name: str) -> Exception:
    return RuntimeError((TEXTS / f"{name}.txt").read_text())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "foreach_batch_python_error",
            "NotADirectoryError: [Errno 20] Not a directory: '/tmp/tmpn4f5722i/blocker/out'",
        ),
        ("executor_python_udf_error", "ValueError: boom 0"),
        ("foreach_batch_calls_failing_udf", "ValueError: boom 0"),
    ],
)
def test_a_python_error_is_reported_by_its_last_exception_line(name, message):
    error = classify_failure(failure(name))
    assert error.message == message
    assert (error.kind, error.node) == ("transient", None)


def test_a_java_error_is_reported_without_the_query_wrapper():
    error = classify_failure(failure("java_error"))
    assert error.message == "[USER_RAISED_EXCEPTION] bad value 1"
    assert (error.kind, error.code) == ("transient", "spark_failed")


def test_a_java_stack_trace_is_reported_by_its_root_cause():
    error = classify_failure(failure("java_error_with_jvm_stacktrace"))
    assert error.message == "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] bad value 0"


def test_the_message_is_at_most_500_characters():
    text = (TEXTS / "executor_python_udf_error.txt").read_text()
    error = classify_failure(RuntimeError(text.replace("ValueError: boom 0", "ValueError: " + "x" * 3000)))
    assert error.message.startswith("ValueError: xxx") and len(error.message) <= 500


def test_a_connectors_own_error_keeps_its_kind_and_message():
    # A connector's FatalError raised on an executor reaches the driver inside a Python traceback.
    text = (TEXTS / "executor_python_udf_error.txt").read_text()
    text = text.replace("ValueError: boom 0", "airflow_conduit.errors.FatalError: bad credentials")
    error = classify_failure(RuntimeError(text.replace("/tmp/hk/py/gen_more.py", "conduit_postgres.py")))
    assert (error.kind, error.code, error.message) == ("fatal", "source_failed", "bad credentials")


def test_a_message_without_a_trace_is_its_first_line():
    error = classify_failure(RuntimeError("executor lost\nmore"))
    assert error.message == "executor lost"
    assert classify_failure(RuntimeError("")).message == "RuntimeError"


def test_a_destination_failure_is_not_called_a_source_failure_because_the_plan_names_the_source():
    """The query's description lists its plan, which names every source (conduit_generator here)."""
    error = failure("foreach_batch_python_error")
    assert "conduit_generator" in str(error)
    assert classify_failure(error).code == "spark_failed"
