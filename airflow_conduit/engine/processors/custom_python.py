"""``custom.python``: a user's Python function per record, run on the executors through Arrow.

The function gets the record as a plain dict ``{position, operation, metadata, key, payload: {before,
after}}`` (structured data as dicts, raw data as bytes) and returns a dict, or ``None`` to filter the
record out. ``TransientError`` / ``FatalError`` from :mod:`airflow_conduit.errors` stop the pipeline;
any other exception nacks the record with the error.
"""

from __future__ import annotations

import functools
import gc
import importlib
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_conduit.config.model import ProcessorConfig
from airflow_conduit.config.settings import CustomPythonSettings
from airflow_conduit.engine.arrow_arrays import string_dicts, string_map_array
from airflow_conduit.engine.delivery import BatchContext
from airflow_conduit.engine.frames import select_sql
from airflow_conduit.engine.processors._expr import active_sql
from airflow_conduit.engine.processors._memo import memoized, planned_deterministic
from airflow_conduit.engine.processors._record_fields import RecordError
from airflow_conduit.errors import ConduitError
from airflow_conduit.record import (
    DATA_FIELDS,
    INTERNAL_COLUMNS,
    JSON_MAP_FUNCTION,
    MAP_JSON_FUNCTION,
    RECORD_COLUMNS,
    SOURCE_SCHEMA,
    STATE_FILTERED,
    STATE_NACKED,
    record_text_sql,
    try_parse_json_sql,
)

# Structured values cross to Python as JSON text, as sources yield them; so does the metadata, as
# conduit_map_json writes it (a map column costs Spark's Arrow writer a struct per row, and its per-row
# size check walks it: 1M records through a mapper that yields its input took 4.53-4.81 s with the
# map against 4.31-4.67 s with the text, in one session, alternating). The mapper runs as a scalar
# Arrow UDF (map_records): what it does not read (the record's place and state, its fields as Spark
# holds them) stays in the JVM beside it, so a field the function left as it was (a bit of _kept) comes
# back from there rather than from its text.
_RECORD_TEXT_SCHEMA = ", ".join(
    "metadata string" if column.startswith("metadata ") else column for column in SOURCE_SCHEMA.split(", ")
)
ARROW_SCHEMA = f"{_RECORD_TEXT_SCHEMA}, _active boolean, _seq bigint"
"""The batches a mapper gets (``_seq`` names the partition for :mod:`._memo`)."""
ARROW_OUTPUT_SCHEMA = f"{_RECORD_TEXT_SCHEMA}, _state string, _error string, _node string, _kept int"
"""The batches a mapper yields: ``_state``, ``_error`` and ``_node`` set where it marked the record (else
null: the record's own), ``_kept`` the fields it gave back unchanged (:data:`KEPT_BITS`; their text, or
their position or operation, is null)."""
KEPT_BITS = {"metadata": 1, "key": 2, "before": 4, "after": 8, "position": 16, "operation": 32}
"""A mapper's ``_kept``: each bit says that field is as it came (the engine keeps the one it had, and
the mapper sends none back)."""
_ALL_KEPT = sum(KEPT_BITS.values())
_ARROW_TYPES = {
    "binary": pa.binary(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
    "array<int>": pa.list_(pa.int32()),
}


def arrow_schema(output: bool = False) -> pa.Schema:
    """:data:`ARROW_SCHEMA` (``output``: :data:`ARROW_OUTPUT_SCHEMA`) as an Arrow schema (for mappers,
    and for tests and benchmarks that make batches without Spark)."""
    columns = (
        column.split(" ", 1) for column in (ARROW_OUTPUT_SCHEMA if output else ARROW_SCHEMA).split(", ")
    )
    return pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in columns])


def load_function(reference: str, path: str | None) -> Callable[..., Any]:
    """The user's function: ``(record)`` or ``(record, context)``; a destination's ``(records, hash)``."""
    if path and path not in sys.path:
        sys.path.insert(0, path)
    module_name, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


# orjson is several times faster than the json module both ways. It reads an integer beyond 64 bits as
# a float and refuses to write one: text with 19 digits in a row, and values orjson cannot write, go
# through the json module (exact). Dates and dataclasses go through ``str``, as with
# json.dumps(default=str). Keys that are not strings are written with OPT_NON_STR_KEYS only when a
# value has them: the option makes every dict slower to write (0.21 against 0.14 µs a record).
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_ORJSON_ANY_KEYS = _ORJSON_OPTIONS | orjson.OPT_NON_STR_KEYS
LONG_NUMBER = "[0-9]{19}"
_LONG_NUMBER = re.compile(LONG_NUMBER)


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value, default=str, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return _dumps_refused(value)


def _dumps_refused(value: Any) -> str:
    """What orjson refused with the common options: keys that are not strings, else the json module."""
    try:
        return orjson.dumps(value, default=str, option=_ORJSON_ANY_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, default=str)


def _data_in(text: str | None, raw: bytes | None, long_number: bool | None = None) -> Any:
    """A data field as the function sees it; ``long_number``: whether ``text`` has a 19-digit run
    (None: look)."""
    if text is None:
        return raw
    if long_number is None:
        long_number = _LONG_NUMBER.search(text) is not None
    if not long_number:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # e.g. a lone surrogate escape, which the json module accepts
            pass
    return json.loads(text)


def _data_out(value: Any) -> tuple[str | None, bytes | None]:
    if value is None:
        return None, None
    if type(value) is dict:  # most structured data: no type checks before it
        return _dumps(value), None
    if isinstance(value, (bytes, bytearray)):
        return None, bytes(value)
    if isinstance(value, str):
        return None, value.encode()
    return _dumps(value), None


def _data_unless_same(value: Any, came_as: str | None) -> tuple[str | None, bytes | None, bool]:
    """A data field's (text, raw) as :func:`_data_out` gives them, and whether its text is the text it
    came as (then no text: the engine keeps the field it had)."""
    text, raw = _data_out(value)
    if text is not None and text == came_as:
        return None, None, True
    return text, raw, False


def _metadata_in(text: str) -> dict[str, str | None]:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # a lone surrogate escape, which the json module accepts
        return json.loads(text)


def _metadata_dicts(texts: list[str | None]) -> list[dict[str, str | None] | None]:
    """The metadata of a batch's rows, read from their text. A source's records mostly share their
    metadata within a batch: a row whose text is the row before's shares its dict (read-only; each
    record the function gets has a copy), so it is parsed once."""
    values: list[dict[str, str | None] | None] = []
    last_text: str | None = None
    last: dict[str, str | None] | None = None
    for text in texts:
        if text != last_text:
            last_text, last = text, None if text is None else _metadata_in(text)
        values.append(last)
    return values


def _metadata_out(metadata: Mapping[Any, Any] | None) -> str | None:
    """Metadata as a mapper gives it back: keys and values through ``str``, as Conduit's are strings."""
    if metadata is None:
        return None
    return _dumps({str(key): str(value) for key, value in metadata.items()})


def _record(
    position: bytes, operation: str, metadata: Any, key: Any, before: Any, after: Any
) -> dict[str, Any]:
    return {
        "position": position,
        "operation": operation,
        "metadata": dict(metadata or ()),
        "key": key,
        "payload": {"before": before, "after": after},
    }


def record_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The plain-dict record a user's function gets, from a row whose data fields are ``*_json`` text
    (structured) or ``*_raw`` bytes."""
    data = [_data_in(row[f"{name}_json"], row[f"{name}_raw"]) for name in DATA_FIELDS]
    return _record(row["position"], row["operation"], row["metadata"], *data)


class _Columns(dict[str, list[Any]]):
    """An Arrow batch's columns as Python lists, each converted when first looked up (``metadata`` as
    dicts): a column nobody reads costs nothing."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        super().__init__()
        self._batch = batch

    def __missing__(self, name: str) -> list[Any]:
        values: list[Any]
        if name in _OUTPUT_ONLY and name not in self._batch.schema.names:  # a mapper's: none yet
            values = [_OUTPUT_ONLY[name]] * self._batch.num_rows
            self[name] = values
            return values
        column = self._batch.column(name)  # KeyError for a column the batch does not have
        if name != "metadata":
            values = column.to_pylist()
        elif pa.types.is_map(column.type):  # a destination's batch
            values = string_dicts(column)
        else:  # a mapper's: the text of conduit_map_json
            values = _metadata_dicts(column.to_pylist())
        self[name] = values
        return values


class ArrowRecords:
    """Column lists of one Arrow batch, updated in place row by row (``custom.python`` and the other
    processors that run Python per record). :meth:`to_batch` rebuilds only the columns marked in
    ``changed``: the rest go back as they came."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.source = batch
        self.columns: dict[str, list[Any]] = _Columns(batch)
        self.changed: set[str] = set()

    @cached_property
    def _data(self) -> list[list[Any]]:
        """Each data field's value for every row, as the function sees it: parsed a column at a time
        (a batch holds Spark's ``arrow.maxRecordsPerBatch`` rows, 10,000 by default), not a call per
        record. Each row's values are handed out once, to :meth:`record`."""
        import pyarrow.compute as pc

        fields = []
        for name in DATA_FIELDS:
            raws = self.columns[f"{name}_raw"]
            json_column = self.source.column(f"{name}_json")
            if json_column.null_count == len(json_column):
                fields.append(raws)
                continue
            texts = self.columns[f"{name}_json"]
            # One vectorised regex per column instead of one per record.
            long_numbers = pc.match_substring_regex(json_column, LONG_NUMBER).to_pylist()
            if not any(long_numbers):
                try:
                    fields.append(
                        [
                            raw if text is None else orjson.loads(text)
                            for text, raw in zip(texts, raws, strict=True)
                        ]
                    )
                    continue
                except orjson.JSONDecodeError:
                    pass  # one text orjson refuses: each on its own below
            fields.append(
                [
                    _data_in(text, raw, bool(long))
                    for text, raw, long in zip(texts, raws, long_numbers, strict=True)
                ]
            )
        return fields

    def record(self, i: int) -> dict[str, Any]:
        """As :func:`record_of`, straight from the column lists (no per-row mapping)."""
        c = self.columns
        keys, befores, afters = self._data
        return _record(c["position"][i], c["operation"][i], c["metadata"][i], keys[i], befores[i], afters[i])

    def mark(self, i: int, state: str, error: str | None, node: str) -> None:
        self.columns["_state"][i], self.columns["_error"][i], self.columns["_node"][i] = state, error, node
        self.changed.update(_MARKED)

    def map_each(self, function: Callable[[dict[str, Any]], Any], node_id: str) -> None:
        """``function`` on each active record (the dict :meth:`record` gives), and its outcome kept in
        the columns: the record it returned, a filter (``None``), or a mark for what it raised.

        One loop over the column lists bound to locals: 15-20% less time per record than a method call
        to build each record and another to store it. Each returned record is stored at once: kept
        until the batch ends, their dicts would make Python's cyclic collector walk them again and
        again (twice the time)."""
        c = self.columns
        active = c["_active"]
        if not any(active):
            return
        positions, operations, metadatas = c["position"], c["operation"], c["metadata"]
        key_json, key_raw = c["key_json"], c["key_raw"]
        before_json, before_raw = c["before_json"], c["before_raw"]
        after_json, after_raw = c["after_json"], c["after_raw"]
        kept = c["_kept"]
        keys, befores, afters = self._data
        dumps = orjson.dumps
        # A column no record changed goes back as it came: each is compared with its copy at the end
        # (list equality, a C loop that takes the same objects as equal at once).
        came = {name: list(c[name]) for name in _SENT_BACK_AS_IS}

        def keep_all(i: int) -> None:  # a record the function did not change: kept whole
            kept[i] = _ALL_KEPT
            positions[i] = operations[i] = metadatas[i] = key_json[i] = before_json[i] = after_json[i] = None

        for i, on in enumerate(active):
            if not on:
                keep_all(i)
                continue
            metadata = metadatas[i]
            record = {
                "position": positions[i],
                "operation": operations[i],
                "metadata": dict(metadata) if metadata else {},
                "key": keys[i],
                "payload": {"before": befores[i], "after": afters[i]},
            }
            try:
                result = function(record)
            except ConduitError as stop:
                self.mark(i, stop.kind, f"{type(stop).__name__}: {stop}", node_id)
                keep_all(i)
                continue
            except RecordError as error:  # a builtin's nack says what Conduit's would
                self.mark(i, STATE_NACKED, str(error), node_id)
                keep_all(i)
                continue
            except Exception as error:  # any other failure nacks this record only
                self.mark(i, STATE_NACKED, f"{type(error).__name__}: {error}", node_id)
                keep_all(i)
                continue
            if result is None:
                self.mark(i, STATE_FILTERED, None, node_id)
                keep_all(i)
                continue
            get = result.get
            # The place and the operation as they came (mostly the very objects) are kept: none sent.
            position = positions[i]
            returned = get("position", position)
            if returned is position or returned == position:
                positions[i] = None
                bits = 16
            else:
                positions[i] = returned.encode() if type(returned) is str else returned
                bits = 0
            operation = operations[i]
            returned = get("operation", operation)
            if returned is operation or returned == operation:
                operations[i] = None
                bits |= 32
            else:
                operations[i] = returned
            returned_metadata = get("metadata") or {}
            if returned_metadata != (metadata or {}):
                metadatas[i] = returned_metadata  # keys and values through str in to_batch
            else:
                metadatas[i] = None
                bits |= 1
            # A field whose new text is the text it came as is kept (its bit set, its text null); raw
            # data given back as the very bytes it came as stays in its column. The common cases inline
            # (a null field, a dict): a call per field costs more than its work.
            key = get("key")
            if key is None:
                key_json[i] = key_raw[i] = None
            elif key is not key_raw[i]:
                key_json[i], key_raw[i], same = _data_unless_same(key, key_json[i])
                bits |= 2 * same
            payload = get("payload") or _NO_PAYLOAD
            before, after = payload.get("before"), payload.get("after")
            if before is None:
                before_json[i] = before_raw[i] = None
            elif before is not before_raw[i]:
                before_json[i], before_raw[i], same = _data_unless_same(before, before_json[i])
                bits |= 4 * same
            if type(after) is dict:
                try:
                    text = dumps(after, default=str, option=_ORJSON_OPTIONS).decode()
                except orjson.JSONEncodeError:
                    text = _dumps_refused(after)
                if text == after_json[i]:
                    after_json[i] = None
                    bits |= 8
                else:
                    after_json[i] = text
                after_raw[i] = None
            elif after is None:
                after_json[i] = after_raw[i] = None
            elif after is not after_raw[i]:
                after_json[i], after_raw[i], same = _data_unless_same(after, after_json[i])
                bits |= 8 * same
            kept[i] = bits
        self.changed.update(_DATA - came.keys())
        self.changed.update(name for name, values in came.items() if c[name] != values)

    def to_batch(self, schema: pa.Schema | None = None) -> pa.RecordBatch:
        """The batch in ``schema`` (the source's by default): its changed columns, and those the
        source does not have, from the lists; the others as they came."""
        schema = schema or self.source.schema
        kept = set(self.source.schema.names) - self.changed
        arrays = [
            self.source.column(field.name) if field.name in kept else self._array(field) for field in schema
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _array(self, field: pa.Field) -> pa.Array:
        values = self.columns[field.name]
        if values.count(None) == len(values):  # e.g. every field kept: no conversion per row
            return pa.nulls(len(values), field.type)
        if field.name == "metadata":
            return self._metadata(field.type)
        return pa.array(values, type=field.type)

    def _metadata(self, kind: pa.DataType) -> pa.Array:
        maps = self.columns["metadata"]
        if pa.types.is_map(kind):
            return string_map_array(maps)
        return pa.array([None if m is None else _metadata_out(m) for m in maps], type=kind)


_NO_PAYLOAD: Mapping[str, Any] = {}
_DATA = frozenset(
    ("position", "operation", "metadata", *(f"{n}_{k}" for n in DATA_FIELDS for k in ("json", "raw")))
)
_SENT_BACK_AS_IS = tuple(f"{n}_raw" for n in DATA_FIELDS)
"""A mapper's columns that usually go back as they came: set per row, rebuilt only if a row changed."""
_MARKED = ("_state", "_error", "_node")
_OUTPUT_ONLY: dict[str, Any] = {**dict.fromkeys(_MARKED), "_kept": 0}
"""A mapper's output columns that its batches do not have, and what each row holds until it is set: no
mark, nothing kept."""


@contextmanager
def _cyclic_collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a batch is mapped (as it was before, after it). A
    batch's parsed fields and records are dicts that hold no cycles, freed as their counts drop: the
    collector's passes over the thousands alive at once are wasted. What a function leaves in cycles
    waits for the batch's end."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@functools.cache
def _freeze_what_the_worker_holds() -> None:
    """Move every object the Python worker holds now (pyspark, pyarrow, the function's modules) out
    of the cyclic collector's reach, once per worker process. Spark's worker runs a full collection
    after each task; over those objects each took 14-19 ms, a tenth of a worker's samples while a 1M
    record pass-through ran. Objects freed by their counts still go at once; only cycles among them
    would stay (module state lives for the process anyway). Only in a Spark task's worker."""
    from pyspark import TaskContext

    if TaskContext.get() is not None:
        gc.freeze()


def _takes_context(function: Callable[..., Any]) -> bool:
    """Whether the function takes a second positional parameter (the batch context)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in parameters)


def make_mapper(
    reference: str,
    path: str | None,
    node_id: str,
    context: dict[str, Any] | None = None,
    settings: str | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator]:
    """The executors' function. ``settings`` (JSON): ``reference`` names a builtin processor's factory,
    called with the settings to make the per-record function."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        function = load_function(reference, path)
        if settings is not None:
            function = function(json.loads(settings))
        elif _takes_context(function):
            user_function, batch_context = function, dict(context or {})
            function = lambda record: user_function(record, batch_context)  # noqa: E731
        # A builtin may map a whole Arrow batch in one call (custom.javascript: a call into V8 per
        # record would cost more than the record's work).
        map_batch = getattr(function, "map_batch", None) if settings is not None else None
        output = arrow_schema(output=True)
        _freeze_what_the_worker_holds()
        for arrow_batch in batches:
            with _cyclic_collector_paused():
                batch = ArrowRecords(arrow_batch)
                if map_batch is not None:
                    map_batch(batch, node_id)
                else:
                    batch.map_each(function, node_id)
                mapped = batch.to_batch(output)
            yield mapped

    return run


def apply(
    records: DataFrame, proc: ProcessorConfig[CustomPythonSettings], batch: BatchContext | None = None
) -> DataFrame:
    """``batch`` gives functions that take a second parameter ``{"pipeline_id", "batch_id",
    "delivery_hash"}``; the hash is this processor's (pipeline, node, source offsets): the same on every
    replay of the micro-batch, so side effects keyed on it stay idempotent."""
    context = None
    if batch is not None:
        context = {
            "pipeline_id": batch.pipeline_id,
            "batch_id": batch.batch_id,
            "delivery_hash": batch.hash_for(proc.node_id),
        }
    # Only strings reach the executors: the function's name and path, not the settings model.
    return map_records(
        records, proc, make_mapper(proc.settings.function, proc.settings.path, proc.node_id, context)
    )


def apply_builtin(records: DataFrame, proc: ProcessorConfig, factory: str) -> DataFrame:
    """A builtin processor written in Python: ``factory`` (``module:function``) makes its per-record
    function from the settings (as Conduit spells them), with the record dict of ``custom.python``."""
    settings = proc.settings.model_dump_json(by_alias=True)
    return map_records(records, proc, make_mapper(factory, None, proc.node_id, settings=settings))


def map_records(
    records: DataFrame,
    proc: ProcessorConfig,
    mapper: Callable[[Iterator[pa.RecordBatch]], Iterator],
    extra: Mapping[str, str] | None = None,
) -> DataFrame:
    """Run ``mapper`` on the records as Arrow batches (:data:`ARROW_SCHEMA`: data fields as JSON text,
    ``_active`` where the processor acts). ``extra``: columns (name -> Spark type) the mapper adds,
    kept in the result.

    The mapper runs as a scalar Arrow UDF, not ``mapInArrow``: Spark sends it only the columns it
    reads and keeps each row beside it in the JVM (``ArrowEvalPythonExec``), so the record's place,
    state and ``VARIANT`` fields never cross to Python and back. Against ``mapInArrow`` with those in
    one packed column, 1M records through a pass-through took 5.8-7.3 s against 6.5-8.6 s (3
    alternating processes, 2 rounds each). The UDF is marked non-deterministic, a barrier to Spark's
    optimizer as ``mapInArrow`` is (:func:`._memo.planned_deterministic`)."""
    from pyspark.sql.functions import arrow_udf

    extra = extra or {}
    arguments = [
        *(F.expr(f"{MAP_JSON_FUNCTION}(metadata)" if c == "metadata" else c) for c in record_text_sql()),
        F.expr(active_sql(proc)),
        F.col("_seq"),
    ]
    # A column list is the DDL of a struct to Spark: the UDF returns one value, the struct of them.
    output_type = ARROW_OUTPUT_SCHEMA + "".join(f", {c} {t}" for c, t in extra.items())
    # pyspark's stubs know an iterator UDF only by its functionType, which warns at run time: its kind
    # comes from _on_arrays' type hints instead.
    udf = arrow_udf(_on_arrays(memoized(mapper, proc.node_id)), returnType=output_type)  # type: ignore[call-overload]
    if not planned_deterministic():
        udf = udf.asNondeterministic()
    mapped = records.withColumn(_MAPPED, udf(*arguments))
    # One Py4J call for the ~20 columns (each F.expr and alias is a call of its own).
    return select_sql(mapped, [*_restored(), *(f"{_MAPPED}.{c} AS {c}" for c in extra)])


_MAPPED = "_mapped"
"""The column of a mapper's output (a struct of :data:`ARROW_OUTPUT_SCHEMA`) beside the record's own."""


def _on_arrays(mapper: Callable[[Iterator[pa.RecordBatch]], Iterator]) -> Callable[..., Iterator[pa.Array]]:
    """``mapper`` as a scalar Arrow iterator UDF (Spark reads its kind from the type hints): each call's
    argument arrays as a batch in, each batch out as one struct array."""
    names = arrow_schema().names

    def run(arguments: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        batches = (pa.RecordBatch.from_arrays(list(arrays), names=names) for arrays in arguments)
        for batch in mapper(batches):
            yield pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))

    return run


def _restored() -> list[str]:
    """The record's columns from a mapper's output: each field it kept as the record had it, the others
    from its text; its state from the mapper where it marked it."""
    out = _MAPPED

    def kept(field: str, given: str) -> str:
        return f"CASE WHEN {out}._kept & {KEPT_BITS[field]} != 0 THEN {field} ELSE {given} END"

    columns = {column: column for column in (*RECORD_COLUMNS, *INTERNAL_COLUMNS)}
    for column in ("position", "operation"):
        columns[column] = kept(column, f"{out}.{column}")
    for column in (f"{field}_raw" for field in DATA_FIELDS):
        columns[column] = f"{out}.{column}"
    # Text that is not JSON (json.dumps, for what orjson refuses, writes a NaN as NaN) still fails the
    # batch in Spark's parse_json, as it did before the engine's faster reader.
    for field in DATA_FIELDS:
        text = f"{out}.{field}_json"
        columns[field] = kept(field, f"coalesce({try_parse_json_sql(text)}, parse_json({text}))")
    columns["metadata"] = kept("metadata", f"{JSON_MAP_FUNCTION}({out}.metadata)")
    marked = f"{out}._state IS NOT NULL"
    columns["_state"] = f"coalesce({out}._state, _state)"
    columns["_error"] = f"CASE WHEN {marked} THEN {out}._error ELSE _error END"
    columns["_node"] = f"CASE WHEN {marked} THEN {out}._node ELSE _node END"
    return [f"{sql} AS {name}" for name, sql in columns.items()]
