"""Follow a pipeline's DLQ store from the triggerer: one asset event per committed DLQ write, live.

:func:`airflow_conduit.assets.dlq_asset` with ``watch=True`` puts this trigger in an ``AssetWatcher``. It
reads only the state dir (:mod:`airflow_conduit.dlq_batches`), so it follows a pipeline whether Airflow,
the CLI or a sensor-watched process runs it.

Exactly once, and why the ledger is written where it is. A trigger event becomes an asset event when the
triggerer's supervisor stores it in the metadata database, some time after ``yield`` returned: recording
the write as announced before the yield, or right after it, loses the event if the triggerer dies before
that store. So the trigger runs in Airflow 3.3's shared-stream *ack mode*: the triggerer calls
:meth:`DLQWriteProducer.advance` only once the events are confirmed persisted, and only then is the write
added to the ledger (``dlq_published.json``). A write whose event was never confirmed is offered again by
the next triggerer. What remains is the interval between the database commit and ``advance`` (one state
sync, about a second): a triggerer killed exactly then announces that one write twice. Nothing is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable, Sequence
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer

from airflow_conduit import dlq_batches
from airflow_conduit.dlq_batches import DLQWrite
from airflow_conduit.state import PipelineState


class DLQWriteProducer(SharedStreamProducer):
    """Polls the DLQ store and offers each committed write not yet in the ledger; records a write in the
    ledger when Airflow has stored its event (:meth:`advance`).

    :param pipeline_id: the pipeline whose DLQ is followed
    :param state_dir: its state dir, as the pipeline runs with it (``--state-dir``)
    :param poll_interval: seconds between looks at the DLQ store
    """

    def __init__(self, pipeline_id: str, state_dir: str, poll_interval: float) -> None:
        self.state = PipelineState.of(state_dir, pipeline_id)
        self.poll_interval = poll_interval
        self._offered: dict[str, DLQWrite] = {}
        """Writes yielded and not yet advanced: never offered twice by one poll."""

    def _pending(self, offered: dict[str, int]) -> list[DLQWrite]:
        """The committed writes beyond the ledger and beyond ``offered`` (a snapshot of :attr:`_offered`
        taken on the event loop: this runs in a thread)."""
        if self.state.root.is_dir():
            dlq_batches.note_watching(self.state)
        ledger = dlq_batches.read_announced(self.state)
        for name, end in offered.items():
            ledger[name] = max(ledger.get(name, 0), end)
        return dlq_batches.committed_writes(self.state.dlq_dir, ledger)

    def _offered_ends(self) -> dict[str, int]:
        return {name: end for write in self._offered.values() for name, (_, end) in write.files.items()}

    async def open_stream(self) -> AsyncIterator[tuple[dict[str, Any], DLQWrite]]:
        while True:
            # Small reads of local files, but the triggerer's loop serves every trigger: not on it.
            for write in await asyncio.to_thread(self._pending, self._offered_ends()):
                extra = await asyncio.to_thread(
                    dlq_batches.describe, self.state.pipeline_id, self.state.dlq_dir, write
                )
                self._offered[write.prefix] = write
                yield extra, write
            await asyncio.sleep(self.poll_interval)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        for item in batch:
            write: DLQWrite = item.broker_payload
            if item.outcome.is_clean:
                await asyncio.to_thread(dlq_batches.mark_announced, self.state, write.files)
            # Only now out of ``_offered``: a poll between the two sees it in one or the other, never in
            # neither (which would offer it again). Not clean (never confirmed stored, or no subscriber):
            # not in the ledger, so the next poll offers it again.
            self._offered.pop(write.prefix, None)

    def get_advance_lane(self, broker_payload: Any) -> Hashable:
        return None


class DLQWatchTrigger(BaseEventTrigger):
    """Fires one event per committed DLQ write of ``pipeline_id``, with the asset event's extra:
    ``records``, ``positions`` (up to 20) or ``first_position``/``last_position``, ``error_codes``,
    ``nodes``, ``path`` and ``files`` (line ranges for :func:`airflow_conduit.dlq_tools.read_dlq_event`),
    ``write`` and ``batch``.

    :param pipeline_id: the pipeline whose DLQ is followed
    :param state_dir: the pipeline's state dir, as the triggerer sees it
    :param poll_interval: seconds between looks at the DLQ store
    """

    def __init__(self, *, pipeline_id: str, state_dir: str, poll_interval: float = 2.0) -> None:
        super().__init__()
        self.pipeline_id = pipeline_id
        self.state_dir = str(state_dir)
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline_id": self.pipeline_id,
                "state_dir": self.state_dir,
                "poll_interval": self.poll_interval,
            },
        )

    # Ack mode: the triggerer runs the producer and advances it once events are stored.
    def shared_stream_key(self) -> Hashable | None:
        return ("conduit-dlq", str(Path(self.state_dir).resolve()), self.pipeline_id)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SharedStreamProducer:
        return DLQWriteProducer(
            kwargs["pipeline_id"], kwargs["state_dir"], float(kwargs.get("poll_interval", 2.0))
        )

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for extra in shared_stream:
            yield TriggerEvent(extra)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Without a shared stream (``trigger.run()`` called directly): yield, then record in the ledger
        when the consumer asks for the next event, i.e. after it took this one."""
        producer = self.create_shared_stream_producer(self.serialize()[1])
        assert isinstance(producer, DLQWriteProducer)
        async for extra, write in producer.open_stream():
            yield TriggerEvent(extra)
            await asyncio.to_thread(dlq_batches.mark_announced, producer.state, write.files)
            producer._offered.pop(write.prefix, None)
