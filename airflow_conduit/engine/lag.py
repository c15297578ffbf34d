"""The sources' lag at the end of each batch, for the batch log (:mod:`airflow_conduit.batch_log`).

A source reports a lag when its module has a ``lag_reader`` (:class:`~.connectors.LagReader`): the file
source in bytes not yet read, the Postgres source in WAL bytes its slot holds, RabbitMQ the queue's ready
messages, NATS the messages its durable consumer has yet to deliver, Redis the entries its consumer group
has yet to deliver. The lag is taken from the
batch's end offsets in Spark's offset log, on the driver, after the batch was published. A lag that cannot
be had (a database that does not answer) is left out of that batch's entry: it never fails a pipeline.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from airflow_conduit.batch_log import SourceLag
from airflow_conduit.config.model import PipelineConfig
from airflow_conduit.engine.connectors import LagReader, SourceContext, plugins

logger = logging.getLogger("airflow_conduit.engine")


def parse_offset(text: str) -> Any:
    """A source's offset as the offset log holds it (JSON), ``None`` for none (``-``) or unreadable."""
    try:
        return json.loads(text)
    except ValueError:
        return None


class SourceLags:
    """The lag readers of a pipeline's sources, by source node id, for one run; :meth:`close` at its end."""

    def __init__(self, pipeline: PipelineConfig) -> None:
        self._readers: list[tuple[int, str, LagReader]] = []
        self._failing: set[str] = set()
        for index, source in enumerate(pipeline.sources):
            # The context the source reads with (as ``inspect`` builds it): the durable consumer or
            # consumer group a source derives from its node id is the one its lag is asked of.
            ctx = SourceContext(source.id, source.node_id, stop_file="", parallelism=1)
            reader = plugins.lag_reader(source, ctx)
            if reader is not None:
                self._readers.append((index, source.node_id, reader))

    def at(self, offsets: Sequence[str]) -> dict[str, SourceLag]:
        """Each reporting source's lag at a batch's end ``offsets`` (one JSON text per source, in the
        pipeline's source order, as :class:`~.delivery.BatchContext` holds them)."""
        lags: dict[str, SourceLag] = {}
        for index, node, reader in self._readers:
            end = parse_offset(offsets[index]) if index < len(offsets) else None
            try:
                lag = reader.lag(end)
            except Exception as error:
                # Logged once per source while it keeps failing: the batch log only loses the point.
                if node not in self._failing:
                    logger.warning("%s: cannot tell the source's lag: %s", node, error)
                self._failing.add(node)
                continue
            self._failing.discard(node)
            if lag is not None:
                lags[node] = lag
        return lags

    def close(self) -> None:
        for _, node, reader in self._readers:
            try:
                reader.close()
            except Exception:
                logger.debug("%s: could not close the lag reader", node, exc_info=True)
