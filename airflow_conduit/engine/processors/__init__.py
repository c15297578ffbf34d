"""Builtin processors, one module each, and the ``custom.python`` adapter."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyspark.sql import DataFrame

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.processors import (
    custom_python,
    error,
    field_convert,
    field_exclude,
    field_rename,
    field_set,
    filter,
    json_decode,
    json_encode,
)

Apply = Callable[[DataFrame, ProcessorConfig], DataFrame]

PROCESSORS: dict[str, Apply] = {
    "field.set": field_set.apply,
    "field.rename": field_rename.apply,
    "field.exclude": field_exclude.apply,
    "field.convert": field_convert.apply,
    "filter": filter.apply,
    "json.decode": json_decode.apply,
    "json.encode": json_encode.apply,
    "error": error.apply,
    "custom.python": custom_python.apply,
}


def apply_all(records: DataFrame, processors: Iterable[ProcessorConfig]) -> DataFrame:
    """Apply processors in the order they are listed, as Conduit does."""
    for proc in processors:
        records = PROCESSORS[proc.plugin](records, proc)
    return records
