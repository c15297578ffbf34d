"""Go templates that have no Spark SQL translation (:mod:`airflow_conduit.config.template_sql`), evaluated
per record in Python on the executors, before the processor's own Spark SQL runs.

For each record the processor would act on (``_state`` open, its SQL condition true), the step evaluates
the condition template, as Conduit does: the text it prints must read as a bool to Go's
``strconv.ParseBool``, else the record is nacked with ``failed evaluating condition: ...``. Where the
condition holds, it evaluates the processor's templated settings (``field.set`` ``value``, ``error``
``message``); a template that cannot be evaluated for the record nacks it, as Conduit's processors do.
The results are columns (``_tpl_cond``, ``_tpl_<setting>``) that the processor reads
(:func:`setting_sql`) and that are dropped after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.template_sql import text_sql
from airflow_conduit.engine.processors._expr import active_sql, sql_str
from airflow_conduit.gotemplate import Template, TemplateExecError, is_template
from airflow_conduit.gotemplate.opencdc import data, record
from airflow_conduit.record import (
    DATA_FIELDS,
    INTERNAL_COLUMNS,
    RECORD_COLUMNS,
    STATE_NACKED,
    variant_json_sql,
)

TEMPLATED_SETTINGS = {"field.set": ("value",), "error": ("message",)}
"""The settings Conduit evaluates as Go templates, by processor."""
CONDITION_COLUMN = "_tpl_cond"
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def column_of(setting: str) -> str:
    return f"_tpl_{setting}"


def python_settings(proc: ProcessorConfig) -> tuple[str, ...]:
    """The processor's templated settings that Spark SQL cannot express."""
    names = TEMPLATED_SETTINGS.get(proc.plugin, ())
    out = []
    for name in names:
        value = getattr(proc.settings, name)
        if is_template(value) and text_sql(Template.parse(value)) is None:
            out.append(name)
    return tuple(out)


def needs_python(proc: ProcessorConfig) -> bool:
    return proc.condition_template is not None or bool(python_settings(proc))


def setting_sql(proc: ProcessorConfig, name: str) -> str:
    """The setting's value for each record as Spark SQL: a literal, a translated template, or the column
    :func:`evaluate` filled in."""
    value: str = getattr(proc.settings, name)
    if not is_template(value):
        return sql_str(value)
    translated = text_sql(Template.parse(value))
    return translated if translated is not None else column_of(name)


def _go_record(columns: dict[str, list[Any]], i: int, decode: Callable[[str | None], Any]) -> Any:
    values = {
        name: data(decode(columns[f"{name}_json"][i]), columns[f"{name}_raw"][i]) for name in DATA_FIELDS
    }
    return record(
        position=columns["position"][i],
        operation=columns["operation"][i],
        metadata=dict(columns["metadata"][i] or ()),
        key=values["key"],
        before=values["before"],
        after=values["after"],
    )


def make_mapper(
    condition: str | None, settings: dict[str, str], node_id: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executors' function: only template texts reach them, parsed there once per task."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from airflow_conduit.engine.processors.custom_python import json_value

        condition_template = Template.parse(condition) if condition else None
        setting_templates = {name: Template.parse(text) for name, text in settings.items()}
        for arrow_batch in batches:
            columns = arrow_batch.to_pydict()
            rows = arrow_batch.num_rows
            columns[CONDITION_COLUMN] = [None] * rows
            for name in setting_templates:
                columns[column_of(name)] = [None] * rows
            for i, active in enumerate(columns["_active"]):
                if not active:
                    continue
                go_record = _go_record(columns, i, json_value)
                try:
                    if condition_template is not None:
                        text = condition_template.execute(go_record)
                        try:
                            holds = parse_bool(text)
                        except ValueError as error:
                            raise TemplateExecError(
                                f"error converting the condition go-template output to boolean, {error}"
                            ) from None
                        columns[CONDITION_COLUMN][i] = holds
                        if not holds:
                            continue
                    else:
                        columns[CONDITION_COLUMN][i] = True
                except TemplateExecError as error:
                    columns["_state"][i], columns["_error"][i] = (
                        STATE_NACKED,
                        f"failed evaluating condition: {error}",
                    )
                    columns["_node"][i] = node_id
                    continue
                for name, template in setting_templates.items():
                    try:
                        columns[column_of(name)][i] = template.execute(go_record)
                    except TemplateExecError as error:
                        columns["_state"][i], columns["_error"][i] = STATE_NACKED, f"{name}: {error}"
                        columns["_node"][i] = node_id
                        break
            yield pa.RecordBatch.from_pydict(columns, schema=_schema(arrow_batch.schema, setting_templates))

    return run


def _schema(schema: pa.Schema, settings: dict[str, Template]) -> pa.Schema:
    fields = [*schema, pa.field(CONDITION_COLUMN, pa.bool_())]
    fields += [pa.field(column_of(name), pa.string()) for name in settings]
    return pa.schema(fields)


def evaluate(records: DataFrame, proc: ProcessorConfig) -> tuple[DataFrame, ProcessorConfig]:
    """The records with the template columns, and the processor with its condition on them."""
    settings = {name: getattr(proc.settings, name) for name in python_settings(proc)}
    as_text = [
        F.expr(variant_json_sql(column)).alias(f"{column}_json") if column in DATA_FIELDS else F.col(column)
        for column in RECORD_COLUMNS
    ]
    prepared = records.select(*as_text, *INTERNAL_COLUMNS, F.expr(active_sql(proc)).alias("_active"))
    # A new schema: StructType.add changes the frame's own (cached) schema in place.
    added = [StructField(CONDITION_COLUMN, BooleanType())]
    added += [StructField(column_of(name), StringType()) for name in settings]
    arrow_schema = StructType([*prepared.schema.fields, *added])
    mapped = prepared.mapInArrow(make_mapper(proc.condition_template, settings, proc.node_id), arrow_schema)
    restored = [
        F.expr(f"parse_json({column}_json)").alias(column) if column in DATA_FIELDS else F.col(column)
        for column in RECORD_COLUMNS
    ]
    extra = [CONDITION_COLUMN, *(column_of(name) for name in settings)]
    evaluated = mapped.select(*restored, *INTERNAL_COLUMNS, *extra)
    condition = f"coalesce({CONDITION_COLUMN}, false)"
    if proc.condition:
        condition = f"({proc.condition}) AND {condition}"
    return evaluated, dataclasses.replace(proc, condition=condition, condition_template=None)


def drop_columns(records: DataFrame) -> DataFrame:
    return records.drop(*(c for c in records.columns if c.startswith("_tpl_")))
