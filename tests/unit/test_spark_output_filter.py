"""What of spark-submit's output the Airflow task log shows at INFO (``SparkOutputFilter``).

``spark_output/`` holds the whole output of two real runs of the engine under ``ConduitHook`` on local
Spark: ``transient_failure.log`` (``tests/airflow/pipelines/flaky.yaml``, its processor raising
``TransientError``: py4j's Python traceback, Spark's Java trace, a summary whose title and error line
rich wrapped) and ``stopped_with_dlq.log`` (``examples/demo.yaml``: four batches, DLQ records).
"""

from __future__ import annotations

import logging
from pathlib import Path

from airflow_conduit.hooks.spark_output import SparkOutputFilter

OUTPUTS = Path(__file__).resolve().parent / "spark_output"
NOISE = ("at ", "\tat ", "java.", "py4j", "Traceback", "Caused by:", "org.apache", "File ")


def sort(lines: list[str]) -> list[tuple[int, str]]:
    output = SparkOutputFilter()
    records = []
    for line in lines:
        records += output.feed(line)
    return records + output.flush()


def info(records: list[tuple[int, str]]) -> list[str]:
    return [text for level, text in records if level >= logging.INFO]


def read(name: str) -> list[str]:
    return (OUTPUTS / name).read_text().splitlines(keepends=True)


def test_a_transient_failure_shows_the_engine_records_and_the_summary():
    lines = read("transient_failure.log")
    records = sort(lines)
    shown = info(records)
    assert shown[0].endswith(" INFO airflow_conduit.engine: flaky: starting (until idle)")
    assert shown[1] == "pipeline flaky: failed (exit 75)"  # rich wrapped it in two lines
    assert shown[2].startswith("\u250f") and shown[-3].startswith("\u2514")
    assert shown[-2:] == [
        "transient error processor_transient at flaky:dependency: TransientError: flaky",
        "dependency unavailable (0.0s after the first failure)",
    ]
    assert len(shown) == 15 and len(lines) == 161
    assert not [text for text in shown if text.lstrip().startswith(NOISE)]
    # Nothing is lost or reordered: the rest is at DEBUG (the title's two lines became one).
    assert len(records) == len(lines) - 1
    assert any(level == logging.DEBUG and text.startswith("\tat org.apache.spark") for level, text in records)


def test_a_graceful_stop_shows_the_batches_and_the_summary_but_not_the_payload_line():
    records = sort(read("stopped_with_dlq.log"))
    shown = info(records)
    batches = [text for text in shown if "airflow_conduit.engine: demo-orders: batch " in text]
    assert len(batches) == 4
    assert "pipeline demo-orders: stopped (exit 0)" in shown
    assert shown[-2:] == [
        "DLQ records: /tmp/hk/demo2/state/demo-orders/dlq  (airflow-conduit dlq",
        "demo-orders)",
    ]
    assert len(shown) == 1 + 4 + 1 + 13 + 2
    assert records[-1][0] == logging.DEBUG and records[-1][1].startswith('{"pipeline": "demo-orders"')


def test_engine_records_keep_their_level_and_their_continuation_lines_go_to_debug():
    records = sort(
        [
            "2026-01-01 00:00:00,000 WARNING airflow_conduit.engine.metrics: could not write m.json\n",
            "Traceback (most recent call last):\n",
            '  File "metrics.py", line 1, in write\n',
            "OSError: disk full\n",
            "2026-01-01 00:00:01,000 ERROR airflow_conduit.engine: p: the query failed: ValueError: x\n",
            "[STREAM_FAILED] Query [id = 1] terminated with exception: ...\n",
            "2026-01-01 00:00:02,000 ERROR py4j.clientserver: There was an exception\n",
            "26/01/01 00:00:03 WARN Utils: Your hostname resolves to a loopback address\n",
        ]
    )
    assert [level for level, _ in records] == [
        logging.WARNING,
        logging.DEBUG,
        logging.DEBUG,
        logging.DEBUG,
        logging.ERROR,
        logging.DEBUG,
        logging.DEBUG,
        logging.DEBUG,
    ]


def test_a_long_title_wrapped_over_several_lines_is_found():
    records = sort(
        [
            "        pipeline\n",
            "  a-pipeline-with-a-lon\n",
            "  g-id: degraded (exit\n",
            "           1)\n",
            "\u250f\u2501\u2501\u2533\u2501\u2501\u2513\n",
            "\u2502 read \u2502 0 \u2502\n",
            "\u2514\u2500\u2500\u2534\u2500\u2500\u2518\n",
            "fatal error processor_fatal at p:x: FatalError: the dependency rejected the credentials of\n",
            "pipeline p when it called\n",  # the error line, wrapped: not a new title
            "26/01/01 00:00:03 INFO ShutdownHookManager: Shutdown hook called\n",
            '{"pipeline": "p", "exit_code": 1}\n',
            "after the payload\n",
        ]
    )
    assert info(records) == [
        "pipeline a-pipeline-with-a-lon g-id: degraded (exit 1)",
        "\u250f\u2501\u2501\u2533\u2501\u2501\u2513",
        "\u2502 read \u2502 0 \u2502",
        "\u2514\u2500\u2500\u2534\u2500\u2500\u2518",
        "fatal error processor_fatal at p:x: FatalError: the dependency rejected the credentials of",
        "pipeline p when it called",
    ]
    assert len(records) == 12 - 3


def test_lines_that_look_like_a_title_but_are_not_are_logged_at_debug_in_order():
    records = sort(["pipeline of thoughts\n", "more\n", "2026-01-01 00:00:00,000 INFO airflow_conduit: x\n"])
    assert records == [
        (logging.DEBUG, "pipeline of thoughts"),
        (logging.DEBUG, "more"),
        (logging.INFO, "2026-01-01 00:00:00,000 INFO airflow_conduit: x"),
    ]
    assert sort(["pipeline p: failed (exit 75)\n"]) == [(logging.DEBUG, "pipeline p: failed (exit 75)")]
