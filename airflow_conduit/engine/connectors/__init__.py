"""Source and destination connectors, one module each, looked up by Conduit plugin name.

A destination writes in two phases: ``stage`` does the work without making it visible, and the returned
object's ``publish`` makes it visible (or ``discard`` drops it), so the engine can refuse a micro-batch
after it was computed without anything of it reaching the destination.

Exactly once: a destination that can keep a delivery marker with its data (the file destination by an
atomic rename, Postgres in the same transaction as the rows) implements ``delivered``; the engine asks it
before staging a batch, and a destination that already holds the batch's delivery hash is acknowledged
without writing. ``publish`` stores the marker together with the data.

The records a destination stages are :data:`~airflow_conduit.record.RECORD_COLUMNS` plus
:data:`~airflow_conduit.record.ORDER_COLUMNS`: ``_seq`` (a bigint, increasing in source order, unique
but for the pieces ``split`` or ``clone`` made of one record, which share it) and ``_piece`` (orders
those pieces). A destination that writes in bulk and finds
records the target refuses (a constraint violation, a value the column rejects) writes the rest and
lists the refused ones in ``Staged.nacks`` as ``(seq, error)``: the engine sends those to the DLQ.

Each plugin's spec (:mod:`airflow_conduit.config.registry`) names its module; the engine calls it through
:mod:`.plugins`, which imports the module on first use. This package imports nothing heavy: Spark's Python workers
import a source's module (and so this package) every time a streaming query starts, and an import of every
connector, the processors and the config loader added about 0.2 s to each start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from airflow_conduit.engine.connectors._stream import Delivery, SourceContext

if TYPE_CHECKING:
    from airflow_conduit.batch_log import SourceLag


class Staged(Protocol):
    def publish(self) -> Any: ...

    def discard(self) -> None: ...


class LagReader(Protocol):
    """A source's lag at the end of a batch (``lag_reader(settings, ctx)`` of a source module, optional;
    ``ctx`` is the :class:`SourceContext` the source reads with, for the names it derives from its node).

    Called on the driver after each batch, with the batch's end offset as Spark's offset log holds it
    (parsed JSON; ``None`` when the source has no offset yet); must be cheap (one stat per file, one
    small query). ``None``: no lag to report for this offset.
    """

    def lag(self, end: Any) -> SourceLag | None: ...

    def close(self) -> None: ...


def nacks_of(staged: Staged) -> list[tuple[int, str]]:
    """The records a destination refused while staging, as ``(seq, error)``."""
    return list(getattr(staged, "nacks", None) or [])


__all__ = ["Delivery", "LagReader", "SourceContext", "Staged", "nacks_of"]
