"""``custom.javascript``: a user's JavaScript ``process(record)`` per record, in embedded V8.

Runs on the executors through :func:`custom_python.apply_builtin`: the script is compiled once per
Python worker (:func:`airflow_conduit.javascript.runtime_for`) and each Arrow batch crosses into V8 in
one call (:meth:`JavascriptProcessor.map_batch`). ``process`` returning ``null`` filters the record;
an exception, or a value that is not a record, nacks it with the error, as Conduit's processor does.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors._record_fields import RecordError
from airflow_conduit.engine.processors.custom_python import ArrowRecords, apply_builtin
from airflow_conduit.javascript import Data, Outcome, encode, encode_value, runtime_for
from airflow_conduit.record import DATA_FIELDS, STATE_FILTERED, STATE_NACKED


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def _value(data: Data) -> Any:
    text, raw = data
    return json.loads(text) if text is not None else raw


class JavascriptProcessor:
    """The per-record function of ``apply_builtin`` (on custom.python's record dict), and the batch
    form the engine uses."""

    def __init__(self, source: str) -> None:
        self.runtime = runtime_for(source)

    def __call__(self, record: dict[str, Any]) -> dict[str, Any] | None:
        payload = record.get("payload") or {}
        item = encode(
            record.get("position"),
            record.get("operation", "create"),
            record.get("metadata"),
            encode_value(record.get("key")),
            encode_value(payload.get("before")),
            encode_value(payload.get("after")),
        )
        [outcome] = self.runtime.run([item])
        if outcome is None:
            return None
        if isinstance(outcome, str):
            raise RecordError(outcome)
        position, operation, metadata, key, before, after = outcome
        return {
            "position": position,
            "operation": operation,
            "metadata": metadata,
            "key": _value(key),
            "payload": {"before": _value(before), "after": _value(after)},
        }

    def map_batch(self, batch: ArrowRecords, node_id: str) -> None:
        """Every active record of the batch through ``process`` in one call; the columns are updated in
        place (structured data stays JSON text: Python never parses it)."""
        c = batch.columns
        active = [i for i, on in enumerate(c["_active"]) if on]
        items = [
            encode(
                c["position"][i],
                c["operation"][i],
                c["metadata"][i],
                *((c[f"{name}_json"][i], c[f"{name}_raw"][i]) for name in DATA_FIELDS),
            )
            for i in active
        ]
        for i, outcome in zip(active, self.runtime.run(items), strict=True):
            self._store(batch, i, outcome, node_id)

    @staticmethod
    def _store(batch: ArrowRecords, i: int, outcome: Outcome, node_id: str) -> None:
        if outcome is None:
            batch.mark(i, STATE_FILTERED, None, node_id)
            return
        if isinstance(outcome, str):
            batch.mark(i, STATE_NACKED, outcome, node_id)
            return
        c = batch.columns
        position, operation, metadata, *data = outcome
        c["position"][i], c["operation"][i] = position, operation
        c["metadata"][i] = list(metadata.items())
        for name, (text, raw) in zip(DATA_FIELDS, data, strict=True):
            c[f"{name}_json"][i], c[f"{name}_raw"][i] = text, raw


def make(settings: dict[str, Any]) -> JavascriptProcessor:
    return JavascriptProcessor(settings["source"])
