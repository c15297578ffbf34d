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

import pyarrow as pa
from pyspark.sql import DataFrame

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.template_sql import source_text_sql
from airflow_conduit.engine.processors._expr import sql_str
from airflow_conduit.engine.processors.custom_python import ArrowRecords, arrow_schema, map_records
from airflow_conduit.gotemplate import Template, TemplateExecError, is_template
from airflow_conduit.gotemplate.opencdc import from_record_dict
from airflow_conduit.record import STATE_NACKED

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
    return tuple(
        name
        for name in names
        if is_template(value := getattr(proc.settings, name)) and source_text_sql(value) is None
    )


def needs_python(proc: ProcessorConfig) -> bool:
    return proc.condition_template is not None or bool(python_settings(proc))


def setting_sql(proc: ProcessorConfig, name: str) -> str:
    """The setting's value for each record as Spark SQL: a literal, a translated template, or the column
    :func:`evaluate` filled in."""
    value: str = getattr(proc.settings, name)
    if not is_template(value):
        return sql_str(value)
    translated = source_text_sql(value)
    return translated if translated is not None else column_of(name)


def make_mapper(
    condition: str | None, settings: dict[str, str], node_id: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executors' function: only template texts reach them, parsed there once per task."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        condition_template = Template.parse(condition) if condition else None
        setting_templates = {name: Template.parse(text) for name, text in settings.items()}
        for arrow_batch in batches:
            batch = ArrowRecords(arrow_batch)
            columns = batch.columns
            columns[CONDITION_COLUMN] = [None] * arrow_batch.num_rows
            for name in setting_templates:
                columns[column_of(name)] = [None] * arrow_batch.num_rows
            for i, active in enumerate(columns["_active"]):
                if not active:
                    continue
                go_record = from_record_dict(batch.record(i))
                try:
                    holds = condition_template is None or _holds(condition_template.execute(go_record))
                except TemplateExecError as error:
                    batch.mark(i, STATE_NACKED, f"failed evaluating condition: {error}", node_id)
                    continue
                columns[CONDITION_COLUMN][i] = holds
                if not holds:
                    continue
                for name, template in setting_templates.items():
                    try:
                        columns[column_of(name)][i] = template.execute(go_record)
                    except TemplateExecError as error:
                        batch.mark(i, STATE_NACKED, f"{name}: {error}", node_id)
                        break
            yield batch.to_batch(_schema(arrow_schema(output=True), setting_templates))

    return run


def _holds(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as error:
        raise TemplateExecError(
            f"error converting the condition go-template output to boolean, {error}"
        ) from None


def _schema(schema: pa.Schema, settings: dict[str, Template]) -> pa.Schema:
    fields = [*schema, pa.field(CONDITION_COLUMN, pa.bool_())]
    fields += [pa.field(column_of(name), pa.string()) for name in settings]
    return pa.schema(fields)


def evaluate(records: DataFrame, proc: ProcessorConfig) -> tuple[DataFrame, ProcessorConfig]:
    """The records with the template columns, and the processor with its condition on them."""
    settings = {name: getattr(proc.settings, name) for name in python_settings(proc)}
    extra = {CONDITION_COLUMN: "boolean", **{column_of(name): "string" for name in settings}}
    mapper = make_mapper(proc.condition_template, settings, proc.node_id)
    evaluated = map_records(records, proc, mapper, extra)
    condition = f"coalesce({CONDITION_COLUMN}, false)"
    if proc.condition:
        condition = f"({proc.condition}) AND {condition}"
    return evaluated, dataclasses.replace(proc, condition=condition, condition_template=None)


def drop_columns(records: DataFrame) -> DataFrame:
    return records.drop(*(c for c in records.columns if c.startswith("_tpl_")))
