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
sync, about a second). To close it, a write is also recorded as *offered* (``dlq_offered.json``) before
the yield; an offer whose fate this producer does not know (a stopped triggerer's, or one Airflow did not
confirm) is settled before anything else: with ``airflow_api_conn_id``, by asking Airflow's REST API
whether an event for that write is stored (then it goes into the ledger, else it is offered again);
without it, by offering it again (a write may then be announced twice, never lost).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Hashable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer

from airflow_conduit import dlq_batches
from airflow_conduit.asset_uris import dlq_uri
from airflow_conduit.dlq_batches import DLQWrite
from airflow_conduit.state import PipelineState

logger = logging.getLogger(__name__)

CLOCK_MARGIN = timedelta(minutes=1)
"""How far before an offer Airflow's stored events are looked for (the triggerer's clock against the
database's)."""


class DLQWriteProducer(SharedStreamProducer):
    """Polls the DLQ store and offers each committed write not yet in the ledger; records a write in the
    ledger when Airflow has stored its event (:meth:`advance`).

    :param pipeline_id: the pipeline whose DLQ is followed
    :param state_dir: its state dir, as the pipeline runs with it (``--state-dir``)
    :param poll_interval: seconds between looks at the DLQ store
    :param airflow_api_conn_id: a connection to Airflow's REST API, to settle offers of unknown fate
        (:mod:`airflow_conduit.hooks.asset_events`); ``None``: they are offered again
    """

    def __init__(
        self, pipeline_id: str, state_dir: str, poll_interval: float, airflow_api_conn_id: str | None = None
    ) -> None:
        self.state = PipelineState.of(state_dir, pipeline_id)
        self.poll_interval = poll_interval
        self.airflow_api_conn_id = airflow_api_conn_id
        self._offered: dict[str, DLQWrite] = {}
        """Writes yielded and not yet advanced: never offered twice by one poll."""

    async def settle(self) -> None:
        """Offers recorded in ``dlq_offered.json`` that this producer has not in flight: into the ledger
        when Airflow stored their event, else forgotten (so the next look offers them again)."""
        uncertain = {
            prefix: at
            for prefix, at in (await asyncio.to_thread(dlq_batches.read_offered, self.state)).items()
            if prefix not in self._offered
        }
        if not uncertain:
            return
        stored = await self._stored(uncertain)
        writes = await asyncio.to_thread(self._committed)
        announced = {
            name: lines
            for prefix in uncertain.keys() & stored
            if prefix in writes
            for name, lines in writes[prefix].files.items()
        }
        if stored:
            logger.info(
                "DLQ writes %s of %s: their events are stored (asked Airflow): not announced again",
                sorted(stored),
                self.state.pipeline_id,
            )
        if uncertain.keys() - stored:
            logger.warning(
                "DLQ writes %s of %s were offered, their events not known to be stored: offered again",
                sorted(uncertain.keys() - stored),
                self.state.pipeline_id,
            )
        await asyncio.to_thread(dlq_batches.settle_offered, self.state, list(uncertain), announced)

    async def _stored(self, offers: dict[str, datetime]) -> set[str]:
        """Which of ``offers`` Airflow stored an event for (none known without an API connection)."""
        if not self.airflow_api_conn_id:
            return set()
        from airflow_conduit.hooks.asset_events import AirflowAssetEventsHook

        try:
            payloads = await AirflowAssetEventsHook(self.airflow_api_conn_id).stored_event_payloads(
                dlq_uri(self.state.pipeline_id), min(offers.values()) - CLOCK_MARGIN
            )
        except Exception as error:  # the API unreachable: offering again keeps every write
            logger.warning("cannot ask Airflow which DLQ events it stored: %s", error)
            return set()
        return {str(payload.get("write")) for payload in payloads} & offers.keys()

    def _committed(self) -> dict[str, DLQWrite]:
        ledger = dlq_batches.read_announced(self.state)
        return {w.prefix: w for w in dlq_batches.committed_writes(self.state.dlq_dir, ledger)}

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
            await self.settle()
            # Small reads of local files, but the triggerer's loop serves every trigger: not on it.
            for write in await asyncio.to_thread(self._pending, self._offered_ends()):
                extra = await asyncio.to_thread(
                    dlq_batches.describe, self.state.pipeline_id, self.state.dlq_dir, write
                )
                self._offered[write.prefix] = write
                await asyncio.to_thread(dlq_batches.mark_offered, self.state, write.prefix)
                yield extra, write
            await asyncio.sleep(self.poll_interval)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        for item in batch:
            write: DLQWrite = item.broker_payload
            if item.outcome.is_clean:
                await asyncio.to_thread(dlq_batches.settle_offered, self.state, [write.prefix], write.files)
            # Only now out of ``_offered``: a poll between the two sees it in one or the other, never in
            # neither (which would offer it again). Not clean (never confirmed stored, or no subscriber):
            # still an offer of unknown fate, which the next poll settles.
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
    :param airflow_api_conn_id: a connection to Airflow's REST API; with it, a write whose event a
        stopped triggerer may have stored is looked up instead of announced again (exactly once across
        triggerer restarts); without it, such a write may be announced twice
    """

    def __init__(
        self,
        *,
        pipeline_id: str,
        state_dir: str,
        poll_interval: float = 2.0,
        airflow_api_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.pipeline_id = pipeline_id
        self.state_dir = str(state_dir)
        self.poll_interval = float(poll_interval)
        self.airflow_api_conn_id = airflow_api_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline_id": self.pipeline_id,
                "state_dir": self.state_dir,
                "poll_interval": self.poll_interval,
                "airflow_api_conn_id": self.airflow_api_conn_id,
            },
        )

    # Ack mode: the triggerer runs the producer and advances it once events are stored.
    def shared_stream_key(self) -> Hashable | None:
        return ("conduit-dlq", str(Path(self.state_dir).resolve()), self.pipeline_id)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SharedStreamProducer:
        return DLQWriteProducer(
            kwargs["pipeline_id"],
            kwargs["state_dir"],
            float(kwargs.get("poll_interval", 2.0)),
            kwargs.get("airflow_api_conn_id"),
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
            await asyncio.to_thread(dlq_batches.settle_offered, producer.state, [write.prefix], write.files)
            producer._offered.pop(write.prefix, None)
