"""The exit payload (DESIGN.md §4) as types: Status, RunRecords, ExitPayload and their JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from airflow_conduit.errors import EXIT_CONFIG, EXIT_FATAL, EXIT_STOPPED, EXIT_TRANSIENT, Code, PipelineError
from airflow_conduit.state import (
    ExitPayload,
    PipelineState,
    RunRecords,
    Status,
    format_time,
    parse_time,
    utc_now,
)

RECORDS = {"read": 1000, "acked": 990, "filtered": 5, "nacked": 5, "dlq": 5, "written": {"orders:out": 985}}
ZEROS = {"read": 0, "acked": 0, "filtered": 0, "nacked": 0, "dlq": 0, "written": {}}
FATAL = {"kind": "fatal", "code": "processor_fatal", "message": "FatalError: no", "node": "orders:check"}
TRANSIENT = {"kind": "transient", "code": "spark_failed", "message": "lost", "node": None}
DLQ = {
    "records": 5,
    "path": "/s/orders/dlq",
    "files": ["000001.jsonl"],
    "first_position": "YQ==",
    "last_position": "Yg==",
    "errors": {"processor_error": 5},
}

# Every shape of payload the engine and the Airflow side produce, as the old code built them.
ENGINE_STOPPED = {
    "pipeline": "orders",
    "status": "stopped",
    "exit_code": 0,
    "error": None,
    "records": RECORDS,
    "batches": 3,
    "started_at": "2026-01-01T00:00:00.000000Z",
    "ended_at": "2026-01-01T00:00:09.000000Z",
    "duration_seconds": 9.001,
    "dlq": DLQ,
    "state_dir": "/s/orders",
}
ENGINE_DEGRADED = {**ENGINE_STOPPED, "status": "degraded", "exit_code": 1, "error": FATAL}
ENGINE_FAILED = {**ENGINE_STOPPED, "status": "failed", "exit_code": 75, "error": TRANSIENT}
CONFIG_FAILURE = {  # engine/runner.py: an invalid plan
    "pipeline": "orders",
    "status": "degraded",
    "exit_code": 2,
    "error": {"kind": "fatal", "code": "invalid_config", "message": "bad", "node": None},
    "records": ZEROS,
    "batches": 0,
    "started_at": "2026-01-01T00:00:00.000000Z",
    "ended_at": "2026-01-01T00:00:00.000000Z",
}
REFUSED = {  # engine/runner.py: the run lock refused the run
    **CONFIG_FAILURE,
    "status": "failed",
    "exit_code": 75,
    "error": {"kind": "transient", "code": "pipeline_locked", "message": "p is running", "node": None},
}
HOOK_STOPPED = {  # hooks/conduit.py: a zero exit without a payload
    "pipeline": "orders",
    "status": "stopped",
    "exit_code": 0,
    "error": None,
    "records": {},
    "started_at": "2026-01-01T00:00:00.000000Z",
    "ended_at": "2026-01-01T00:00:09.000000Z",
}
HOOK_FAILED = {  # hooks/conduit.py: a failure without a payload
    **HOOK_STOPPED,
    "status": "failed",
    "exit_code": 75,
    "error": {"kind": "transient", "code": "spark_failed", "message": "exited with 137", "node": None},
    "spark_submit_returncode": 137,
}
HOOK_CONFIG = {
    **HOOK_FAILED,
    "status": "degraded",
    "exit_code": 2,
    "error": {"kind": "fatal", "code": "invalid_config", "message": "exited with 2", "node": None},
    "spark_submit_returncode": 2,
}
LOST_ENGINE = {**HOOK_FAILED}  # operators/one_engine.py: a reattached engine that left no payload
del LOST_ENGINE["spark_submit_returncode"]

SHAPES = {
    "engine_stopped": ENGINE_STOPPED,
    "engine_degraded": ENGINE_DEGRADED,
    "engine_failed": ENGINE_FAILED,
    "config_failure": CONFIG_FAILURE,
    "refused": REFUSED,
    "hook_stopped": HOOK_STOPPED,
    "hook_failed": HOOK_FAILED,
    "hook_config": HOOK_CONFIG,
    "lost_engine": LOST_ENGINE,
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_every_payload_shape_round_trips_to_the_same_json(shape):
    payload = ExitPayload.from_dict(shape)
    assert payload.to_dict() == shape
    assert json.dumps(payload.to_dict()) == json.dumps(shape)  # the same keys in the same order
    assert ExitPayload.from_dict(json.loads(json.dumps(payload.to_dict()))) == payload


def test_the_types_of_an_engine_payload():
    payload = ExitPayload.from_dict(ENGINE_DEGRADED)
    assert payload.status is Status.DEGRADED and payload.status == "degraded"
    assert payload.error == PipelineError("fatal", "processor_fatal", "FatalError: no", "orders:check")
    assert payload.records == RunRecords(1000, 990, 5, 5, 5, {"orders:out": 985})
    assert payload.kind == "fatal" and payload.batches == 3 and payload.duration_seconds == 9.001
    assert payload.dlq == DLQ and payload.state_dir == "/s/orders" and payload.extra == {}


def test_an_exit_json_written_by_the_old_engine(tmp_path):
    """A real exit.json of the engine before the types (indent 1), read and written back unchanged."""
    state = PipelineState.of(tmp_path, "flaky")
    state.root.mkdir(parents=True)
    text = """{
 "pipeline": "flaky",
 "status": "failed",
 "exit_code": 75,
 "error": {
  "kind": "transient",
  "code": "processor_transient",
  "message": "TransientError: flaky dependency unavailable (0.0s after the first failure)",
  "node": "flaky:dependency"
 },
 "records": {
  "read": 0,
  "acked": 0,
  "filtered": 0,
  "nacked": 0,
  "dlq": 0,
  "written": {}
 },
 "batches": 0,
 "started_at": "2026-11-24T10:36:45.066164Z",
 "ended_at": "2026-11-24T10:37:07.379089Z",
 "duration_seconds": 22.313,
 "dlq": {
  "records": 0,
  "path": "/tmp/hk/flaky2/state/flaky/dlq",
  "files": [],
  "first_position": null,
  "last_position": null,
  "errors": {}
 },
 "state_dir": "/tmp/hk/flaky2/state/flaky"
}
"""
    state.exit_file.write_text(text)
    payload = state.read_exit()
    assert payload is not None
    assert payload.status is Status.FAILED and payload.kind == "transient"
    assert payload.error is not None and payload.error.code == "processor_transient"
    assert payload.error.node == "flaky:dependency" and payload.counters == RunRecords()
    state.write_exit_payload(payload)
    assert state.exit_file.read_text() == text
    assert state.read_exit_payload() == json.loads(text)


def test_write_exit_payload_takes_a_dict_too(tmp_path):
    state = PipelineState.of(tmp_path, "orders")
    state.write_exit_payload(ENGINE_STOPPED)
    assert state.read_exit() == ExitPayload.from_dict(ENGINE_STOPPED)
    assert PipelineState.of(tmp_path, "nothing").read_exit() is None


def test_unknown_keys_survive_a_round_trip():
    data = {**HOOK_STOPPED, "attempt": 3, "note": {"x": 1}}
    payload = ExitPayload.from_dict(data)
    assert payload.extra == {"attempt": 3, "note": {"x": 1}}
    assert payload.to_dict() == data


def test_from_dict_tolerates_what_readers_tolerated():
    """Readers used ``.get`` with defaults: missing records are none, a missing status or exit code
    follows from the error, an error without kind from the exit code."""
    bare = ExitPayload.from_dict({"exit_code": 0})
    assert (bare.pipeline, bare.status, bare.error, bare.records, bare.batches) == (
        "",
        Status.STOPPED,
        None,
        None,
        None,
    )
    assert bare.counters == RunRecords() and bare.kind is None
    assert bare.to_dict() == {
        "pipeline": "",
        "status": "stopped",
        "exit_code": 0,
        "error": None,
        "records": {},
    }

    partial = ExitPayload.from_dict({"pipeline": "p", "exit_code": 0, "records": {"acked": 3, "read": "x"}})
    assert partial.records == RunRecords(acked=3) and partial.records.progressed

    transient = ExitPayload.from_dict({"exit_code": 75, "error": {"code": "x", "message": "m"}})
    assert transient.status is Status.FAILED and transient.kind == "transient"
    assert transient.error == PipelineError("transient", "x", "m", None)

    no_code = ExitPayload.from_dict({"error": FATAL})
    assert no_code.exit_code == EXIT_FATAL and no_code.status is Status.DEGRADED

    assert ExitPayload.from_dict({"status": "failed"}).exit_code == EXIT_TRANSIENT
    assert ExitPayload.from_dict({"status": "stopped"}).exit_code == EXIT_STOPPED
    assert ExitPayload.from_dict({"status": "weird", "exit_code": 1}).status is Status.DEGRADED
    assert ExitPayload.from_dict({"exit_code": "junk"}).exit_code == EXIT_TRANSIENT


@pytest.mark.parametrize(
    ("error", "status", "exit_code"),
    [
        (PipelineError("fatal", Code.PROCESSOR_FATAL, "m", "p:n"), Status.DEGRADED, EXIT_FATAL),
        (PipelineError("transient", Code.SPARK_FAILED, "m"), Status.FAILED, EXIT_TRANSIENT),
    ],
)
def test_failure_follows_the_error(error, status, exit_code):
    payload = ExitPayload.failure("p", error)
    assert (payload.status, payload.exit_code, payload.error) == (status, exit_code, error)
    assert payload.started_at == payload.ended_at and payload.records is None
    parse_time(payload.started_at or "")  # a timestamp in the one format


def test_failure_with_an_exit_code_times_and_counters():
    error = PipelineError("fatal", Code.INVALID_CONFIG, "bad")
    payload = ExitPayload.failure(
        "orders",
        error,
        exit_code=EXIT_CONFIG,
        started_at="2026-01-01T00:00:00.000000Z",
        ended_at="2026-01-01T00:00:00.000000Z",
        records=RunRecords(),
        batches=0,
    )
    assert payload.to_dict() == CONFIG_FAILURE | {"error": error.to_dict()}


def test_status_is_a_string():
    assert Status.RUNNING == "running" and json.dumps({"s": Status.RECOVERING}) == '{"s": "recovering"}'
    assert f"{Status.DEGRADED}" == "degraded"
    assert [s for s in Status if s.terminal] == [Status.DEGRADED, Status.STOPPED, Status.FAILED]
    assert Status.of_error(None) is Status.STOPPED


def test_write_status_takes_the_enum(tmp_path):
    state = PipelineState.of(tmp_path, "p")
    state.write_status(Status.RECOVERING, attempt=1)
    assert json.loads(state.status_file.read_text())["status"] == "recovering"


def test_one_timestamp_format():
    moment = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    assert format_time(moment) == "2026-01-02T03:04:05.006000Z"
    assert format_time(moment.astimezone(timezone(timedelta(hours=2)))) == "2026-01-02T03:04:05.006000Z"
    assert parse_time(format_time(moment)) == moment
    assert parse_time(utc_now()).tzinfo is not None


def test_failure_builds_the_three_hand_built_failure_payloads():
    """The invalid plan and the refused run (engine), the job without a payload (hook), the vanished
    engine (operator): one constructor, the JSON they had."""
    times = {"started_at": "2026-01-01T00:00:00.000000Z", "ended_at": "2026-01-01T00:00:00.000000Z"}
    refused = PipelineError("transient", Code.PIPELINE_LOCKED, "p is running")
    got = ExitPayload.failure("orders", refused, records=RunRecords(), batches=0, **times)
    assert got.to_dict() == REFUSED

    times = {"started_at": HOOK_STOPPED["started_at"], "ended_at": HOOK_STOPPED["ended_at"]}
    lost = PipelineError("transient", Code.SPARK_FAILED, "exited with 137")
    assert ExitPayload.failure("orders", lost, **times).to_dict() == LOST_ENGINE
    assert ExitPayload.failure("orders", lost, spark_submit_returncode=137, **times).to_dict() == HOOK_FAILED
    config = PipelineError("fatal", Code.INVALID_CONFIG, "exited with 2")
    got = ExitPayload.failure("orders", config, exit_code=EXIT_CONFIG, spark_submit_returncode=2, **times)
    assert got.to_dict() == HOOK_CONFIG
