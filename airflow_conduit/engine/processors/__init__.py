"""Builtin processors, one module each, and the ``custom.python`` adapter.

A processor's spec (:mod:`airflow_conduit.config.registry`) names its module, imported here on first use.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.delivery import BatchContext
from airflow_conduit.engine.frames import with_sql
from airflow_conduit.engine.processors import _memo, _templates


def apply(records: DataFrame, proc: ProcessorConfig, batch: BatchContext | None = None) -> DataFrame:
    """Apply one processor; ``batch`` reaches only a processor that reads the batch's context
    (``custom.python``)."""
    if _templates.needs_python(proc):
        # Go templates with no Spark SQL translation: evaluated per record first, read as columns.
        evaluated, proc = _templates.evaluate(records, proc)
        return _templates.drop_columns(_apply_module(evaluated, proc, batch))
    return _apply_module(records, proc, batch)


def _apply_module(records: DataFrame, proc: ProcessorConfig, batch: BatchContext | None) -> DataFrame:
    spec = proc.spec
    module = spec.implementation()
    applied: DataFrame = (
        module.apply(records, proc, batch) if spec.batch_context else module.apply(records, proc)
    )
    return applied


# Spark calls these deterministic, but fixes their value per query: two actions see two values.
_PER_QUERY = re.compile(r"\b(current_timestamp|current_date|current_time|now|localtimestamp)\(", re.I)


def is_pure(proc: ProcessorConfig, empty: DataFrame) -> bool:
    """Whether applying ``proc`` twice to the same record gives the same result: a built-in whose Spark
    SQL (its ``condition`` and settings) Spark deems deterministic and that reads no clock. Only such
    processors may be evaluated again from stored rows. A plugin whose spec is not ``pure`` (user code:
    services that flake, random values) never is: a replay of a batch cannot recompute its decision
    (see engine/decisions.py).

    :param empty: an empty frame of records to analyse the processor on
    """
    if not proc.spec.pure or _templates.needs_python(proc):
        return False  # a template may call uuidv4 or randAlphaNum: decided once, like user code
    return repeats_in_attempt(proc, empty)


def repeats_in_attempt(proc: ProcessorConfig, empty: DataFrame, *, fresh: bool = False) -> bool:
    """Whether a second evaluation of ``proc`` in the same batch attempt gives the first one's result
    when its Python mappers keep their output (:mod:`._memo`): Spark deems its plan deterministic (a
    Python mapper counts as such) and it reads no clock. Every pure processor does; so does one whose
    only impure part is the Python it runs per record (user code, a template's random values).

    Analysing raises what Spark finds wrong with the processor's SQL: the run's plan check calls this
    with ``fresh`` (always analyse), and the run's first batch takes the answer it kept (per session,
    per processor) rather than analyse again (30-50 ms for a ``custom.python`` processor)."""
    known = _REPEATS.setdefault(empty.sparkSession, {})
    if fresh or proc not in known:
        with _memo.analysing():
            plan = apply(empty, proc)._jdf.queryExecution().analyzed()
        known[proc] = bool(plan.deterministic()) and not _PER_QUERY.search(plan.toString())
    return known[proc]


_REPEATS: weakref.WeakKeyDictionary[SparkSession, dict[ProcessorConfig, bool]] = weakref.WeakKeyDictionary()
""":func:`repeats_in_attempt`'s answers, per session."""


# The identity on ``_state``, but not deterministic in Spark's eyes (``spark_partition_id``): see apply_all.
_STATE_BARRIER = "CASE WHEN spark_partition_id() >= 0 THEN _state END"


def apply_all(
    records: DataFrame, processors: Iterable[ProcessorConfig], batch: BatchContext | None = None
) -> DataFrame:
    """Apply processors in the order they are listed, as Conduit does.

    The chain ends with an optimizer barrier. Each processor's columns are ``CASE`` expressions that
    name the previous processor's columns more than once; Spark's ``CollapseProject`` knows not to
    inline such expressions, but predicate pushdown does not: a filter on ``_state`` above the chain
    (the engine has several: open records per destination, nacked ones for the DLQ) would be pushed
    through every processor, its condition growing several times per processor (a few processors that
    can nack made a plan of millions of nodes and an OutOfMemoryError on the driver). Spark never
    pushes a filter through a projection with a non-deterministic column, so ``_state`` is passed
    through one.
    """
    applied = False
    for proc in processors:
        records = apply(records, proc, batch)
        applied = True
    if applied:
        records = with_sql(records, {"_state": _STATE_BARRIER})
    return records
