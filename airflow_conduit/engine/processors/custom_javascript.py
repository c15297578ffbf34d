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
from airflow_conduit.javascript import (
    CHANGED,
    INPUT_COLUMNS,
    STATE_FILTERED,
    STATE_NACKED,
    encode_value,
    runtime_for,
)
from airflow_conduit.record import DATA_FIELDS
from airflow_conduit.record import STATE_FILTERED as FILTERED
from airflow_conduit.record import STATE_NACKED as NACKED


def apply(records: DataFrame, proc: ProcessorConfig) -> DataFrame:
    return apply_builtin(records, proc, f"{__name__}:make")


def _value(text: str | None, raw: bytes | None) -> Any:
    return json.loads(text) if text is not None else raw


class JavascriptProcessor:
    """The per-record function of ``apply_builtin`` (on custom.python's record dict), and the batch
    form the engine uses."""

    def __init__(self, source: str) -> None:
        self.runtime = runtime_for(source)

    def __call__(self, record: dict[str, Any]) -> dict[str, Any] | None:
        payload = record.get("payload") or {}
        columns: dict[str, list[Any]] = {
            "position": [record.get("position")],
            "operation": [record.get("operation", "create")],
            "metadata": [dict(record.get("metadata") or {})],
        }
        data_in = {"key": record.get("key"), "before": payload.get("before"), "after": payload.get("after")}
        for name, value in data_in.items():
            text, raw = encode_value(value)
            columns[f"{name}_json"], columns[f"{name}_raw"] = [text], [raw]
        out = {name: values[0] for name, values in self.runtime.run(columns).items()}
        if out["state"] == STATE_FILTERED:
            return None
        if out["state"] == STATE_NACKED:
            raise RecordError(out["error"])
        for name, bit in CHANGED.items():  # what the script did not touch is as it came
            if not out["changed"] & bit:
                out[name] = columns[name][0]
        out["metadata"] = dict(out["metadata"])
        data = {name: _value(out[f"{name}_json"], out[f"{name}_raw"]) for name in DATA_FIELDS}
        return {
            "position": out["position"],
            "operation": out["operation"],
            "metadata": out["metadata"],
            "key": data["key"],
            "payload": {"before": data["before"], "after": data["after"]},
        }

    def map_batch(self, batch: ArrowRecords, node_id: str) -> None:
        """Every active record of the batch through ``process`` in one call; the columns are updated in
        place (structured data stays JSON text: Python never parses it)."""
        c = batch.columns
        active = [i for i, on in enumerate(c["_active"]) if on]
        out = self.runtime.run({name: [c[name][i] for i in active] for name in INPUT_COLUMNS})
        states, errors, changed = out["state"], out["error"], out["changed"]
        kept = []
        for k, i in enumerate(active):
            if states[k] == STATE_FILTERED:
                batch.mark(i, FILTERED, None, node_id)
            elif states[k] == STATE_NACKED:
                batch.mark(i, NACKED, errors[k], node_id)  # the DLQ gets the record as it came
            else:
                kept.append((k, i))
        # Column by column (the fewest lookups per record), only where the script touched the field.
        for name, bit in CHANGED.items():
            touched = [(k, i) for k, i in kept if changed[k] & bit]
            if touched:
                column, values = c[name], out[name]
                for k, i in touched:
                    column[i] = values[k]
                batch.changed.add(name)


def make(settings: dict[str, Any]) -> JavascriptProcessor:
    return JavascriptProcessor(settings["source"])
