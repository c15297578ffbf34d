"""Plugin settings: one pydantic model per builtin plugin, and the plugin registry.

Conduit's settings are ``map[string]string``; the loader hands every value over as a string and the models
coerce laxly (``"10"`` -> 10). Keys keep Conduit's spelling (aliases such as ``recordCount`` and
``format.type``), and the validated settings are stored as ``model_dump(by_alias=True)``.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..record import OPERATIONS
from .fieldref import FieldRef, parse_field_list, parse_field_ref, parse_rename_mapping

PluginKind = Literal["source", "destination", "processor"]
# Backpressure: the most records a source puts in one micro-batch (memory stays flat whatever the
# backlog). Large enough that the ~0.1-0.7 s fixed cost of a micro-batch stays small beside its work.
DEFAULT_MAX_RECORDS_PER_BATCH = 250_000

RequiredStr = Annotated[str, Field(min_length=1)]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _check_ref(value: str, *, forbid: Iterable[str] = (), setting: str = "field") -> FieldRef:
    ref = parse_field_ref(value)
    if ref.root in forbid:
        raise ValueError(f"{setting} cannot be {str(ref)}")
    return ref


def _comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# --- connectors ----------------------------------------------------------------------------------------

FieldType = Literal["int", "string", "bool", "time", "duration"]
_FORMAT_OPTIONS = "format.options"


class GeneratorSettings(_Settings):
    record_count: int = Field(-1, alias="recordCount")
    """Records to produce; -1 means unbounded."""
    rate: float = Field(0.0, ge=0)
    """Records per second; 0 means no limit."""
    collections: str = ""
    operations: str = "create"
    format_type: Literal["structured", "raw"] = Field("structured", alias="format.type")
    format_options: dict[str, FieldType] = Field(
        default_factory=lambda: {"id": "int", "name": "string"}, alias=_FORMAT_OPTIONS
    )
    """Field name -> type; written as ``format.options.<field>: <type>`` keys, as in Conduit."""
    seed: int = 0
    max_records_per_batch: int = Field(DEFAULT_MAX_RECORDS_PER_BATCH, ge=1, alias="maxRecordsPerBatch")

    @model_validator(mode="before")
    @classmethod
    def _collect_format_options(cls, data: Any) -> Any:
        # Conduit spreads the schema over dynamic keys; gather them so the model can check them as one map.
        if not isinstance(data, Mapping):
            return data
        prefix = _FORMAT_OPTIONS + "."
        options = {
            k[len(prefix) :]: v for k, v in data.items() if isinstance(k, str) and k.startswith(prefix)
        }
        if not options:
            return data
        rest = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(prefix))}
        rest[_FORMAT_OPTIONS] = {**dict(rest.get(_FORMAT_OPTIONS) or {}), **options}
        return rest

    @field_validator("record_count")
    @classmethod
    def _check_record_count(cls, value: int) -> int:
        if value < -1:
            raise ValueError("must be -1 (unbounded) or >= 0")
        return value

    @field_validator("collections")
    @classmethod
    def _normalise_collections(cls, value: str) -> str:
        return ",".join(_comma_list(value))

    @field_validator("operations")
    @classmethod
    def _check_operations(cls, value: str) -> str:
        ops = _comma_list(value)
        bad = [op for op in ops if op not in OPERATIONS]
        if bad or not ops:
            raise ValueError(f"must be a comma-separated list of {', '.join(OPERATIONS)}; got {value!r}")
        return ",".join(ops)


class FileSourceSettings(_Settings):
    path: RequiredStr
    max_records_per_batch: int = Field(DEFAULT_MAX_RECORDS_PER_BATCH, ge=1, alias="maxRecordsPerBatch")


class _DestinationSettings(_Settings):
    namespace: str = ".*"
    """Extension (as in Transporter): a regex over ``opencdc.collection`` selecting the records received."""

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a valid regular expression: {error}") from None
        return value


class FileDestinationSettings(_DestinationSettings):
    path: RequiredStr


class LogDestinationSettings(_DestinationSettings):
    level: Literal["debug", "info", "warn", "error"] = "info"
    message: str = ""


_POSTGRES_URL = re.compile(r"postgres(?:ql)?://\S+")


def _check_postgres_url(value: str) -> str:
    value = value.strip()
    if not _POSTGRES_URL.fullmatch(value):
        # The value may hold a password: never echo it.
        raise ValueError("must be a URL like postgresql://user:password@host:5432/database")
    return value


class PostgresSourceSettings(_Settings):
    """Conduit's postgres source: snapshot of ``tables``, then CDC (logical replication or long polling)."""

    url: RequiredStr
    tables: RequiredStr
    """Comma-separated table names (``table`` is accepted as in Conduit's older releases)."""
    key: str = ""
    """The column that orders the snapshot (default: each table's primary key)."""
    snapshot_mode: Literal["initial", "never"] = Field("initial", alias="snapshotMode")
    cdc_mode: Literal["auto", "logrepl", "long_polling"] = Field("auto", alias="cdcMode")
    slot_name: str = Field("conduitslot", alias="logrepl.slotName", pattern=r"^[a-z0-9_]{1,63}$")
    ordering_column: str = Field("", alias="orderingColumn")
    """``long_polling``: an increasing column; records with a greater value are read next."""
    poll_interval: float = Field(1.0, gt=0, alias="pollingPeriod")
    max_records_per_batch: int = Field(DEFAULT_MAX_RECORDS_PER_BATCH, ge=1, alias="maxRecordsPerBatch")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _check_postgres_url(value)

    @model_validator(mode="before")
    @classmethod
    def _table_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "table" in data and "tables" not in data:
            data = dict(data)
            data["tables"] = data.pop("table")
        return data

    @model_validator(mode="after")
    def _check_long_polling(self) -> PostgresSourceSettings:
        if self.cdc_mode == "long_polling" and not self.ordering_column:
            raise ValueError("cdcMode long_polling needs orderingColumn (an increasing column)")
        return self


class PostgresDestinationSettings(_DestinationSettings):
    """Conduit's postgres destination; exactly once through a delivery marker in the same transaction."""

    url: RequiredStr
    table: str = ""
    """Target table; empty: the record's ``opencdc.collection``."""
    key: str = ""
    """Key column: upsert on it when set (and delete by it), insert otherwise."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _check_postgres_url(value)


# --- processors ----------------------------------------------------------------------------------------


class FieldSetSettings(_Settings):
    field: str
    value: str

    @field_validator("field")
    @classmethod
    def _check_field(cls, value: str) -> str:
        _check_ref(value, forbid=("position",))
        return value.strip()

    @field_validator("value")
    @classmethod
    def _check_operation_value(cls, value: str, info: ValidationInfo) -> str:
        # Runs after `field` (declaration order); `field` is absent from info.data when it was invalid.
        target = info.data.get("field")
        if target and parse_field_ref(target).root == "operation" and value not in OPERATIONS:
            raise ValueError(f"value for .Operation must be one of {', '.join(OPERATIONS)}; got {value!r}")
        return value


class FieldRenameSettings(_Settings):
    mapping: RequiredStr
    """``ref:newName,ref2:newName2``; parse with :func:`fieldref.parse_rename_mapping`."""

    @field_validator("mapping")
    @classmethod
    def _check_mapping(cls, value: str) -> str:
        parse_rename_mapping(value)
        return value


class FieldExcludeSettings(_Settings):
    fields: RequiredStr
    """Comma-separated references; parse with :func:`fieldref.parse_field_list`."""

    @field_validator("fields")
    @classmethod
    def _check_fields(cls, value: str) -> str:
        for ref in parse_field_list(value):
            if ref.root in ("position", "operation"):
                raise ValueError(f"cannot exclude {str(ref)}")
        return value


class _FieldSettings(_Settings):
    """A processor acting on one field, which may be anything but ``.Position``."""

    field: str

    @field_validator("field")
    @classmethod
    def _check_field(cls, value: str) -> str:
        _check_ref(value, forbid=("position",))
        return value.strip()


class FieldConvertSettings(_FieldSettings):
    type: Literal["string", "int", "float", "bool"]


class FilterSettings(_Settings):
    pass


class JsonDecodeSettings(_FieldSettings):
    pass


class JsonEncodeSettings(_FieldSettings):
    pass


class ErrorSettings(_Settings):
    message: str = "error processor triggered"


_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


class CustomPythonSettings(_Settings):
    function: str
    """``module:callable``; the module is imported with ``path`` at the front of ``sys.path``."""
    path: str | None = None
    """A directory; relative paths are resolved against the pipeline file's directory and stored absolute."""

    @field_validator("function")
    @classmethod
    def _check_function(cls, value: str) -> str:
        value = value.strip()
        if not _FUNCTION.fullmatch(value):
            raise ValueError(f"must be 'module:callable' (e.g. my_transforms:mask_email); got {value!r}")
        return value

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if not value:
            return None
        base = Path((info.context or {}).get("base_dir") or ".")
        return str((base / Path(value).expanduser()).resolve())


class PythonDestinationSettings(CustomPythonSettings, _DestinationSettings):
    """``custom.python`` as a destination: ``function(records, delivery_hash)`` per micro-batch."""


def check_python_function(function: str, path: str | None) -> str | None:
    """Import ``module:callable`` as the engine will; returns a problem description or ``None``."""
    module_name, _, attr_path = function.partition(":")
    saved = list(sys.path)
    try:
        if path:
            sys.path.insert(0, path)
        importlib.invalidate_caches()
        target: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            target = getattr(target, attr)
        if not callable(target):
            return f"{function!r} is not callable"
        return None
    except Exception as error:  # any failure of user code at import time is a config problem
        return f"{type(error).__name__}: {error}"
    finally:
        sys.path[:] = saved


# --- registry ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginSpec:
    name: str
    kind: PluginKind
    settings_model: type[BaseModel]


def _specs(*specs: PluginSpec) -> dict[str, dict[PluginKind, PluginSpec]]:
    registry: dict[str, dict[PluginKind, PluginSpec]] = {}
    for spec in specs:
        registry.setdefault(spec.name, {})[spec.kind] = spec
    return registry


PLUGINS: dict[str, dict[PluginKind, PluginSpec]] = _specs(
    PluginSpec("builtin:generator", "source", GeneratorSettings),
    PluginSpec("builtin:file", "source", FileSourceSettings),
    PluginSpec("builtin:file", "destination", FileDestinationSettings),
    PluginSpec("builtin:log", "destination", LogDestinationSettings),
    PluginSpec("builtin:postgres", "source", PostgresSourceSettings),
    PluginSpec("builtin:postgres", "destination", PostgresDestinationSettings),
    PluginSpec("custom.python", "destination", PythonDestinationSettings),
    PluginSpec("field.set", "processor", FieldSetSettings),
    PluginSpec("field.rename", "processor", FieldRenameSettings),
    PluginSpec("field.exclude", "processor", FieldExcludeSettings),
    PluginSpec("field.convert", "processor", FieldConvertSettings),
    PluginSpec("filter", "processor", FilterSettings),
    PluginSpec("json.decode", "processor", JsonDecodeSettings),
    PluginSpec("json.encode", "processor", JsonEncodeSettings),
    PluginSpec("error", "processor", ErrorSettings),
    PluginSpec("custom.python", "processor", CustomPythonSettings),
)
"""Plugin name -> kind -> spec (``builtin:file`` is both a source and a destination)."""


def plugin_spec(name: str, kind: PluginKind) -> PluginSpec | None:
    return PLUGINS.get(name, {}).get(kind)


def plugin_names(*kinds: PluginKind) -> list[str]:
    """Sorted names of the plugins that have at least one of ``kinds``."""
    return sorted(name for name, by_kind in PLUGINS.items() if any(k in by_kind for k in kinds))


def known_settings(model: type[BaseModel]) -> list[str]:
    keys = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        keys.append(f"{key}.<field>" if key == _FORMAT_OPTIONS else key)
    return sorted(keys)


def _issue_message(error: Mapping[str, Any], spec: PluginSpec, key: str) -> str:
    kind = error["type"]
    if kind == "missing":
        return f"required setting {key!r} is missing"
    if kind == "extra_forbidden":
        known = known_settings(spec.settings_model)
        listed = f"known: {', '.join(known)}" if known else f"{spec.name} takes no settings"
        return f"unknown setting {key!r} for {spec.name} ({listed})"
    if kind == "string_too_short":
        return "must not be empty"
    message: str = error["msg"]
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    return f"{message} (got {error['input']!r})" if "input" in error else message


def validate_settings(
    spec: PluginSpec, raw: Mapping[str, str], base_dir: str | Path | None = None
) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    """Validate ``raw`` settings for ``spec``.

    Returns ``(settings, [])`` with the dumped settings (Conduit key names, defaults filled), or
    ``(None, issues)`` where each issue is ``(setting key as the user wrote it or "", message)``.
    """
    try:
        model = spec.settings_model.model_validate(dict(raw), context={"base_dir": base_dir})
    except ValidationError as error:
        issues = []
        for item in error.errors():
            key = ".".join(str(part) for part in item["loc"])
            issues.append((key, _issue_message(item, spec, key)))
        return None, issues
    return model.model_dump(by_alias=True), []
