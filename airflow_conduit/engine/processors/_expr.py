"""Spark SQL building blocks the builtin processors share.

Every processor acts on records whose ``_state`` is ``open`` and whose condition holds; its changes are
``CASE WHEN`` expressions, so a micro-batch stays one Spark plan with no per-record Python.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from airflow_conduit.config.fieldref import FieldRef, sql_string, variant_path
from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.engine.frames import with_sql
from airflow_conduit.record import VARIANT_SET_FUNCTION

EMPTY_OBJECT = "cast(map() as map<string,variant>)"
EMPTY_METADATA = "cast(map() as map<string,string>)"


sql_str = sql_string


def json_path(segments: tuple[str, ...]) -> str:
    """A variant path such as ``$.a.b`` or ``$.a['x y']``, as a SQL string literal."""
    return sql_string(variant_path(segments))


def object_map(variant_sql: str) -> str:
    return f"coalesce(try_variant_get({variant_sql}, '$', 'map<string,variant>'), {EMPTY_OBJECT})"


def get_path(variant_sql: str, segments: tuple[str, ...], type_name: str | None = None) -> str:
    if type_name:
        return f"try_variant_get({variant_sql}, {json_path(segments)}, {sql_str(type_name)})"
    return f"try_variant_get({variant_sql}, {json_path(segments)})"


def set_path(variant_sql: str, segments: tuple[str, ...], value_sql: str) -> str:
    """The object ``variant_sql`` with the field at ``segments`` set to the VARIANT ``value_sql``."""
    head, rest = segments[0], segments[1:]
    if rest:
        value_sql = set_path(get_path(variant_sql, (head,)), rest, value_sql)
    # to_variant_object(map_concat(<the object as a map>, map(head, value))), without the map
    return f"{VARIANT_SET_FUNCTION}({variant_sql}, {sql_str(head)}, {value_sql})"


def update_parent(variant_sql: str, segments: tuple[str, ...], change_map: str) -> str:
    """Apply ``change_map`` (a SQL template over ``{m}``, the parent object as a map) to the parent of
    the field at ``segments``."""
    parent = segments[:-1]
    if not parent:
        return f"to_variant_object({change_map.format(m=object_map(variant_sql))})"
    changed = f"to_variant_object({change_map.format(m=object_map(get_path(variant_sql, parent)))})"
    return set_path(variant_sql, parent, changed)


def where_field_exists(ref: FieldRef, changed: str) -> str:
    """``changed`` only where the field exists: a missing field (or raw data, which has no fields) is
    left alone, so its parents are not created and a null payload does not become an empty object."""
    return f"CASE WHEN {get_path(ref.root, ref.path)} IS NULL THEN {ref.root} ELSE {changed} END"


def active_sql(proc: ProcessorConfig) -> str:
    if proc.condition:
        return f"_state = 'open' AND coalesce(({proc.condition}), false)"
    return "_state = 'open'"


def apply_changes(
    records: DataFrame,
    proc: ProcessorConfig,
    changes: dict[str, str],
    *,
    problem: str | None = None,
    problem_message: str | None = None,
    prelude: dict[str, str] | None = None,
) -> DataFrame:
    """Apply ``changes`` (column -> SQL) to the active records; nack those where ``problem`` holds.

    ``prelude`` columns are computed first and may be used by the other expressions (so an expensive
    value such as a parsed JSON document is computed once); they are dropped afterwards.
    """
    prelude = prelude or {}
    problem_sql = f"(_active AND coalesce(({problem}), false))" if problem else "false"
    columns = {
        column: f"CASE WHEN _active AND NOT _problem THEN {sql} ELSE {column} END"
        for column, sql in changes.items()
    }
    if problem:
        message = problem_message or sql_str(f"{proc.plugin} failed")
        columns["_state"] = "CASE WHEN _problem THEN 'nacked' ELSE _state END"
        columns["_error"] = f"CASE WHEN _problem THEN {message} ELSE _error END"
        columns["_node"] = f"CASE WHEN _problem THEN {sql_str(proc.node_id)} ELSE _node END"
    return with_sql(  # one call to the JVM for the steps
        records,
        {"_active": active_sql(proc)},
        {name: f"CASE WHEN _active THEN {sql} END" for name, sql in prelude.items()},
        {"_problem": problem_sql},
        columns,
        drop=["_active", "_problem", *prelude],
    )


def raw_problem(ref: FieldRef) -> str:
    """A nested field of raw data cannot be addressed: that record is nacked."""
    return f"{ref.root} IS NULL AND {ref.root}_raw IS NOT NULL"


def raw_problem_message(proc: ProcessorConfig, field: str) -> str:
    return sql_str(f"{proc.plugin}: {field} is in raw data; decode it first (json.decode)")


def unsupported(proc: ProcessorConfig, ref: FieldRef) -> ValueError:
    return ValueError(f"{proc.node_id}: {proc.plugin} cannot act on {ref}")
