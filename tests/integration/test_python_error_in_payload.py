"""A Python error in the foreachBatch function, through the real engine: the exit payload names the
error itself (not Spark's ``[STREAM_FAILED] ... Traceback (most recent call last):``), and the engine's
log keeps the whole text for the person who needs the trace."""

from __future__ import annotations

import logging

PIPELINE = """
version: "2.2"
pipelines:
  - id: blocked
    connectors:
      - {id: gen, type: source, plugin: builtin:generator, settings: {recordCount: 5}}
      - {id: out, type: destination, plugin: builtin:file, settings: {path: "{tmp}/blocker/out"}}
"""


def test_a_destination_error_is_named_in_the_payload_and_logged_in_full(run_yaml, tmp_path, caplog):
    (tmp_path / "blocker").write_text("a file where the destination wants a directory")
    caplog.set_level(logging.INFO, logger="airflow_conduit.engine")
    payload = run_yaml(PIPELINE)
    error = payload["error"]
    assert (payload["exit_code"], error["kind"]) == (75, "transient")
    assert error["message"] == f"NotADirectoryError: [Errno 20] Not a directory: '{tmp_path}/blocker/out'"
    engine = [r for r in caplog.records if r.name == "airflow_conduit.engine" and r.levelno >= logging.ERROR]
    assert len(engine) == 1
    logged = engine[0].getMessage()
    assert logged.splitlines()[0] == f"blocked: the query failed: {error['message']}"
    assert "[STREAM_FAILED]" in logged and "Traceback (most recent call last):" in logged
