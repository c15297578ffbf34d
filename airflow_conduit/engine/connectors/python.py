"""``custom.python`` as a destination: a user's ``module:callable`` gets each micro-batch.

The callable is called on the driver as ``function(records, delivery_hash)`` once per micro-batch, after
the batch is known to be good (the DLQ window held and no processor stopped the pipeline), with the
records as plain dicts in source order (the ``custom.python`` processor's record shape). The engine
cannot hold a marker for a side effect it does not know, so a replayed batch calls the function again
with the same ``delivery_hash``: store it with the side effect (as Cues does) to make it idempotent.
``TransientError`` / ``FatalError`` stop the pipeline as such; any other exception is transient (the
batch is not committed and is delivered again on restart).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from airflow_conduit.engine.connectors._stream import Delivery
from airflow_conduit.engine.processors.custom_python import load_function, record_of
from airflow_conduit.errors import ConduitError, TransientError
from airflow_conduit.record import ORDER_COLUMNS, record_text_sql

if TYPE_CHECKING:
    from airflow_conduit.config.settings import PythonDestinationSettings


@dataclass(frozen=True)
class StagedCall:
    records: DataFrame
    function_ref: str
    path: str | None
    delivery: Delivery

    def _dicts(self) -> Iterator[dict[str, Any]]:
        for row in self.records.toLocalIterator():
            yield record_of(row.asDict())

    def publish(self) -> None:
        function = load_function(self.function_ref, self.path)
        try:
            function(list(self._dicts()), self.delivery.hash)
        except ConduitError:
            raise
        except Exception as error:
            raise TransientError(
                f"custom.python destination {self.function_ref}: {type(error).__name__}: {error}"
            ) from error
        finally:
            self.records.unpersist()

    def discard(self) -> None:
        self.records.unpersist()


def stage(records: DataFrame, settings: PythonDestinationSettings, delivery: Delivery) -> StagedCall:
    # One partition sorted by (_seq, _piece) is source order; a global orderBy would run a sampling job that
    # evaluates the batch (and the engine's record counts) a second time.
    ordered = (
        records.repartition(1).sortWithinPartitions(*ORDER_COLUMNS).selectExpr(*record_text_sql()).persist()
    )
    ordered.write.format("noop").mode("overwrite").save()  # computed now, while the batch is decided
    return StagedCall(ordered, settings.function, settings.path, delivery)
