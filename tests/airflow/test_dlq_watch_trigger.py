"""The live DLQ watcher (``dlq_asset(..., watch=True)``) on a DLQ store the real engine wrote.

One CLI run (one Spark start) puts records into the DLQ over several micro-batches; the tests copy its
state dir and run the trigger's async generator and its ack-mode producer against the copy.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome
from conftest import VENV_BIN

from airflow_conduit import dlq_batches, dlq_tools
from airflow_conduit.assets import dlq_asset
from airflow_conduit.dlq_batches import DLQWrite
from airflow_conduit.state import PipelineState
from airflow_conduit.triggers.dlq_watch import DLQWatchTrigger, DLQWriteProducer

pytestmark = pytest.mark.engine

PIPELINE_ID = "watched"
PIPELINE = """\
version: "2.2"
pipelines:
  - id: watched
    connectors:
      - id: numbers
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "40"
          maxRecordsPerBatch: "8"
          collections: numbers
          seed: "3"
          format.type: structured
          format.options.n: int
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: {output}
    processors:
      - id: reject-some
        plugin: error
        condition: CAST(.Payload.After.n AS BIGINT) % 3 = 0
        settings:
          message: n is a multiple of 3
    dead-letter-queue:
      plugin: builtin:log
      window-size: 0
"""
NEXT_EVENT = 60.0
"""Seconds to wait for an event that is due: a hang fails the test instead of blocking it."""


@pytest.fixture(scope="module")
def engine_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir into which the real engine wrote several DLQ batches."""
    root = tmp_path_factory.mktemp("dlq-watch")
    pipeline = root / "pipeline.yaml"
    pipeline.write_text(PIPELINE.format(output=root / "out"))
    state_dir = root / "state"
    env = {**os.environ, "PYSPARK_PYTHON": str(VENV_BIN / "python")}
    run = subprocess.run(
        [
            str(VENV_BIN / "airflow-conduit"),
            "run",
            str(pipeline),
            "--until-idle",
            "--state-dir",
            str(state_dir),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return state_dir


@pytest.fixture
def state(engine_state: Path, tmp_path: Path) -> PipelineState:
    """A fresh copy of the engine's state dir, nothing announced yet."""
    copy = tmp_path / "state"
    shutil.copytree(engine_state, copy)
    return PipelineState.of(copy, PIPELINE_ID)


def store_writes(state: PipelineState) -> dict[str, set[str]]:
    """The DLQ writes in the store, as the engine named its files: ``{GENERATION-BATCH: {file, ...}}``."""
    writes: dict[str, set[str]] = {}
    for path in dlq_tools.dlq_files(state.dlq_dir):
        writes.setdefault(dlq_batches.write_prefix(path.name), set()).add(path.name)
    return writes


def trigger_of(state: PipelineState) -> DLQWatchTrigger:
    return DLQWatchTrigger(pipeline_id=PIPELINE_ID, state_dir=str(state.state_dir), poll_interval=0.2)


class Stream:
    """An async generator read with deadlines, without cancelling it: a pending read stays pending for
    the next call (cancelling ``anext`` would end the generator)."""

    def __init__(self, generator: AsyncIterator[Any]) -> None:
        self.generator = generator
        self.pending: asyncio.Future[Any] | None = None

    async def next(self, timeout: float = NEXT_EVENT) -> Any:
        if self.pending is None:
            self.pending = asyncio.ensure_future(anext(self.generator))
        done, _ = await asyncio.wait({self.pending}, timeout=timeout)
        if not done:
            raise TimeoutError
        item, self.pending = self.pending.result(), None
        return item

    async def take(self, count: int) -> list[Any]:
        return [await self.next() for _ in range(count)]

    async def quiet(self, polls: float = 5) -> bool:
        """Whether the generator stays quiet for a few of its 0.2 s polls."""
        try:
            await self.next(0.2 * polls)
        except TimeoutError:
            return True
        return False

    async def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            await asyncio.gather(self.pending, return_exceptions=True)
        await self.generator.aclose()  # type: ignore[attr-defined]


def events_of(state: PipelineState) -> Stream:
    return Stream(trigger_of(state).run())


async def payloads(stream: Stream, count: int) -> list[dict[str, Any]]:
    return [event.payload for event in await stream.take(count)]


def test_one_event_per_committed_dlq_write(state: PipelineState) -> None:
    writes = store_writes(state)
    assert len(writes) >= 2, f"the pipeline should nack in several batches: {writes}"

    async def scenario() -> tuple[list[dict[str, Any]], bool]:
        events = events_of(state)
        taken = await payloads(events, len(writes))
        quiet = await events.quiet()
        await events.close()
        return taken, quiet

    taken, quiet = asyncio.run(scenario())
    assert quiet, "an event beyond the DLQ writes in the store"
    assert [p["write"] for p in taken] == sorted(writes)
    for payload in taken:
        assert set(payload["files"]) == writes[payload["write"]]
        entries = dlq_tools.read_dlq_event(payload)
        assert payload["records"] == len(entries) > 0
        assert payload["positions"] == [dlq_tools.position_text(e.position) for e in entries]
        assert payload["error_codes"] == ["n is a multiple of 3"]
        assert payload["nodes"] == ["watched:reject-some"]
    # Together the events name every DLQ record once, as Airflow stores them (under "payload").
    announced = [e for p in taken for e in dlq_tools.read_dlq_event({"from_trigger": True, "payload": p})]
    assert [dlq_tools.entry_id(e) for e in announced] == [
        dlq_tools.entry_id(e) for e in dlq_tools.read_dlq(state.dlq_dir)
    ]


def half_publish(state: PipelineState) -> tuple[str, Path]:
    """Put the store in the state of a later batch whose first part is in place and whose marker is not
    yet written (step 2 of jsonl_files' publishing), with a staged batch beside it."""
    last = sorted(dlq_tools.dlq_files(state.dlq_dir))[-1]
    generation = last.name.split("-")[0]
    prefix = f"{generation}-{999:012d}"
    shutil.copy(last, state.dlq_dir / f"{prefix}-00000.jsonl")
    (state.dlq_dir / f"_commit-{prefix}").mkdir()
    staged = state.dlq_dir / f"_tmp-{generation}-{1000:012d}"
    staged.mkdir()
    shutil.copy(last, staged / "part-00000")
    return prefix, last


def test_a_half_published_write_is_announced_only_once_its_marker_names_it(state: PipelineState) -> None:
    writes = store_writes(state)
    prefix, _ = half_publish(state)

    async def scenario() -> tuple[list[dict[str, Any]], bool, list[dict[str, Any]]]:
        events = events_of(state)
        before = await payloads(events, len(writes))
        quiet = await events.quiet()
        # The engine finishes publishing: the marker names the batch.
        marker = next(state.dlq_dir.glob(".delivery-*.json"))
        delivery = json.loads(marker.read_text())
        marker.write_text(json.dumps({**delivery, "batch": 999}))
        (state.dlq_dir / f"_commit-{prefix}").rmdir()
        after = await payloads(events, 1)
        await events.close()
        return before, quiet, after

    before, quiet, after = asyncio.run(scenario())
    assert prefix not in [p["write"] for p in before]
    assert quiet, "a write was announced before its marker named it"
    assert after[0]["write"] == prefix and after[0]["batch"] == 999
    assert list(after[0]["files"]) == [f"{prefix}-00000.jsonl"]


def test_a_restarted_trigger_resumes_after_what_was_taken(state: PipelineState) -> None:
    writes = sorted(store_writes(state))

    async def first_life() -> list[dict[str, Any]]:
        events = events_of(state)
        # Asking for the second event is taking the first: only then is it in the ledger.
        taken = await payloads(events, 2)
        await events.close()  # the triggerer stops: the second was handed over but never confirmed
        return taken

    async def second_life() -> tuple[list[dict[str, Any]], bool]:
        events = events_of(state)
        rest = await payloads(events, len(writes) - 1)
        quiet = await events.quiet()
        await events.close()
        return rest, quiet

    first = asyncio.run(first_life())
    assert [p["write"] for p in first] == writes[:2]
    assert set(dlq_batches.read_announced(state)) == {
        f for f in store_files(state) if f.startswith(writes[0])
    }
    rest, quiet = asyncio.run(second_life())
    assert quiet
    assert [p["write"] for p in rest] == writes[1:]


def store_files(state: PipelineState) -> list[str]:
    return [p.name for p in dlq_tools.dlq_files(state.dlq_dir)]


def clean(write: DLQWrite) -> AdvanceItem:
    return AdvanceItem(broker_payload=write, outcome=AdvanceOutcome(acked=1, failed=0))


def test_ack_mode_ledger_holds_only_writes_airflow_stored(state: PipelineState) -> None:
    """The triggerer's ack mode: ``advance`` comes once the events are stored; a write whose event was not
    confirmed (ack timeout: ``failed``) is offered again, by this producer and after a restart."""
    writes = sorted(store_writes(state))

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        producer = DLQWriteProducer(PIPELINE_ID, str(state.state_dir), 0.2)
        stream = Stream(producer.open_stream())
        offered = await stream.take(len(writes))
        assert await stream.quiet(), "a write offered twice before its advance"
        first, second = offered[0][1], offered[1][1]
        await producer.advance([clean(first), AdvanceItem(second, AdvanceOutcome(acked=0, failed=1))])
        again = (await stream.next())[1]
        await stream.close()
        # A new triggerer: a new producer, on the same ledger.
        restarted = DLQWriteProducer(PIPELINE_ID, str(state.state_dir), 0.2)
        stream = Stream(restarted.open_stream())
        after_restart = [item[1] for item in await stream.take(len(writes) - 1)]
        assert await stream.quiet()
        await stream.close()
        return [w.prefix for _, w in offered], [again.prefix], [w.prefix for w in after_restart]

    offered, again, after_restart = asyncio.run(scenario())
    assert offered == writes
    assert again == [writes[1]]
    assert after_restart == writes[1:]


def test_watched_asset_and_trigger_serialization(tmp_path: Path) -> None:
    plain = dlq_asset("orders:v2")
    watched = dlq_asset("orders:v2", state_dir=tmp_path, watch=True, poll_interval=1.5)
    assert (watched.name, watched.uri) == (plain.name, plain.uri) == ("conduit://orders~v2/dlq",) * 2
    assert not plain.watchers
    (watcher,) = watched.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == "airflow_conduit.triggers.dlq_watch.DLQWatchTrigger"
    assert kwargs == {
        "pipeline_id": "orders:v2",
        "state_dir": str(tmp_path),
        "poll_interval": 1.5,
        "airflow_api_conn_id": None,
    }
    assert DLQWatchTrigger(**kwargs).serialize() == (classpath, kwargs)
    with pytest.raises(ValueError, match="state_dir"):
        dlq_asset("orders", watch=True)


def test_the_operator_leaves_announcing_to_a_watcher(state: PipelineState) -> None:
    from airflow_conduit.operators.pipeline import ConduitPipelineOperator

    def publish(operator: ConduitPipelineOperator) -> tuple[dict[str, Any], dict[Any, Any]]:
        outlet_events: dict[Any, Any] = {}

        class Events(dict):  # the task context's outlet_events: an accessor per asset
            def __missing__(self, key: Any) -> Any:
                self[key] = type("Accessor", (), {"extra": None})()
                return self[key]

        events = Events()
        extra = operator._publish_dlq({"outlet_events": events})  # type: ignore[arg-type]
        outlet_events.update(events)
        return extra, outlet_events

    def operator(**kwargs: Any) -> ConduitPipelineOperator:
        return ConduitPipelineOperator(
            task_id="run",
            pipeline_file="p.yaml",
            pipeline_id=PIPELINE_ID,
            state_dir=str(state.state_dir),
            **kwargs,
        )

    watched = operator(outlets=[dlq_asset(PIPELINE_ID, state_dir=state.state_dir, watch=True)])
    extra, events = publish(watched)
    assert extra["announced_by"] == "watcher" and not events
    assert dlq_batches.read_announced(state) == {}

    # A watcher announced the first write (Airflow stored its event), then went away.
    async def watcher_announces_first_write() -> DLQWrite:
        producer = DLQWriteProducer(PIPELINE_ID, str(state.state_dir), 0.2)
        stream = Stream(producer.open_stream())
        _, first = await stream.next()
        await producer.advance([clean(first)])
        await stream.close()
        return first

    first = asyncio.run(watcher_announces_first_write())
    (state.root / dlq_batches.WATCH_FILE).unlink()
    first_records = len(dlq_tools.read_dlq(state.dlq_dir, ranges=first.files))

    # Without a watcher the task announces the rest in one event, and a second run nothing more.
    plain = operator()
    extra, events = publish(plain)
    assert extra["records"] == len(dlq_tools.read_dlq(state.dlq_dir)) - first_records and len(events) == 1
    assert not set(extra["files"]) & set(first.files)
    assert dlq_batches.read_announced(state) == dlq_tools.snapshot(state.dlq_dir)
    extra, events = publish(operator())
    assert extra["records"] == 0 and not events

    # A watcher declared in another DAG is seen through the state dir.
    dlq_batches.note_watching(state)
    assert operator()._dlq_watched()


def test_an_offer_of_unknown_fate_is_offered_again_when_airflow_cannot_be_asked(
    state: PipelineState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A triggerer stopped between its offer and the confirmation leaves the write in ``dlq_offered.json``.
    The next producer asks the API server; when it cannot answer (nothing listens), the write is offered
    again: announced twice at worst, never lost."""
    writes = sorted(store_writes(state))
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_UNREACHABLE_API", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port})
    )

    async def scenario() -> tuple[str, list[str], dict[str, Any]]:
        first = DLQWriteProducer(PIPELINE_ID, str(state.state_dir), 0.2)
        stream = Stream(first.open_stream())
        _, offered = await stream.next()
        await stream.close()  # stopped before Airflow confirmed it
        left = dlq_batches.read_offered(state)
        restarted = DLQWriteProducer(PIPELINE_ID, str(state.state_dir), 0.2, "unreachable_api")
        stream = Stream(restarted.open_stream())
        again = [item[1].prefix for item in await stream.take(len(writes))]
        await stream.close()
        return offered.prefix, again, left

    offered, again, left = asyncio.run(scenario())
    assert set(left) == {offered} == {writes[0]}
    assert again == writes
