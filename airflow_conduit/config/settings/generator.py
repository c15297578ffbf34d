"""``builtin:generator``: its settings and its spec (Conduit's conduit-connector-generator ``config.go``)."""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...record import OPERATIONS
from ..spec import PluginSettings, PluginSpec
from ._common import comma_list, gather_prefixed, go_duration
from .sdk import SourceSdkSettings

FieldType = Literal["int", "string", "bool", "time", "duration"]
FormatType = Literal["structured", "raw", "file"]
_FIELD_TYPES: tuple[str, ...] = typing.get_args(FieldType)
_FORMAT_OPTIONS = "format.options"
_PATH = "path"
# Conduit's per-collection keys: collections.<name>.operations, .format.type, .format.options.<x>.
_COLLECTION_KEY = re.compile(r"collections\.(.+?)\.(operations|format\.type|format\.options\..+)")


def _default_fields() -> dict[str, str]:
    return {"id": "int", "name": "string"}


class _Collection(PluginSettings):
    """The records of one collection: their operations and payload format (Conduit's CollectionConfig)."""

    operations: str = "create"
    format_type: FormatType = Field("structured", alias="format.type")
    format_options: dict[str, str] = Field(default_factory=dict, alias="format.options")
    """structured/raw: field name -> type (``format.options.<field>: <type>``); file: ``path``."""

    @model_validator(mode="before")
    @classmethod
    def _collect_format_options(cls, data: Any) -> Any:
        return gather_prefixed(data, _FORMAT_OPTIONS)

    @field_validator("operations")
    @classmethod
    def _check_operations(cls, value: str) -> str:
        ops = comma_list(value)
        bad = [op for op in ops if op not in OPERATIONS]
        if bad or not ops:
            raise ValueError(f"must be a comma-separated list of {', '.join(OPERATIONS)}; got {value!r}")
        return ",".join(ops)

    @model_validator(mode="after")
    def _check_format(self) -> Any:
        if self.format_type == "file":
            path = self.format_options.get(_PATH, "")
            if not path:
                raise ValueError(
                    "format.type file: format.options.path not specified (the file whose contents "
                    "are the payload)"
                )
            if not (os.path.isfile(path) and os.access(path, os.R_OK)):
                raise ValueError(f"format.options.path: cannot read the file {path!r}")
            return self
        # Conduit matches a type case-insensitively; the value generated follows the lower-case name.
        fields = {name.strip(): kind.strip().lower() for name, kind in self.format_options.items()}
        for name, kind in fields.items():
            if not name:
                raise ValueError("format.options: got an empty field name")
            if kind not in _FIELD_TYPES:
                raise ValueError(
                    f"format.options.{name}: unknown data type {kind!r} (one of {', '.join(_FIELD_TYPES)})"
                )
        object.__setattr__(self, "format_options", fields)
        return self

    @property
    def fields(self) -> dict[str, str]:
        """The payload's fields and their types (none: the payload is a file's contents)."""
        return {} if self.format_type == "file" else dict(self.format_options)

    @property
    def file_path(self) -> str:
        return self.format_options.get(_PATH, "") if self.format_type == "file" else ""


class CollectionSettings(_Collection):
    """``collections.<name>.*``: a named collection; Conduit requires its ``format.type``."""

    format_type: FormatType = Field(alias="format.type")


class GeneratorSettings(SourceSdkSettings, _Collection):
    """The top-level ``operations`` and ``format.*`` configure Conduit's default collection (records
    without ``opencdc.collection``); ``collections.<name>.*`` configure named ones."""

    format_options: dict[str, str] = Field(default_factory=_default_fields, alias="format.options")
    record_count: int = Field(-1, alias="recordCount")
    """Records to produce; 0 (Conduit's spelling) or -1 means unbounded."""
    rate: float = Field(0.0, ge=0)
    """Records per second; 0 means no limit."""
    read_time: str = Field("", alias="readTime", exclude=True)
    """Conduit's deprecated spelling of the rate: the time one record takes (a Go duration)."""
    burst_sleep_time: float = Field(0.0, alias="burst.sleepTime")
    """Seconds the generator sleeps between bursts (0: no bursts)."""
    burst_generate_time: float = Field(1.0, alias="burst.generateTime")
    """Seconds a burst lasts (only with ``burst.sleepTime``)."""
    collections: dict[str, CollectionSettings] = Field(default_factory=dict)
    """Conduit's per-collection map, written as ``collections.<name>.<setting>`` keys."""
    collection_list: str = Field("", exclude=True)
    """The older form, ``collections: a,b``: names taken round-robin, each with the top-level format
    (a name listed twice gets twice the records)."""
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _collect_collections(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        rest: dict[str, Any] = {}
        spread: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            match = _COLLECTION_KEY.fullmatch(key) if isinstance(key, str) else None
            if match is None and isinstance(key, str) and key.startswith("collections."):
                # An unknown per-collection setting: the collection model names it.
                match = re.fullmatch(r"collections\.([^.]+)\.(.+)", key)
            if match is None:
                rest[key] = value
            else:
                spread.setdefault(match.group(1), {})[match.group(2)] = value
        listed = rest.pop("collections", None)
        if isinstance(listed, str):
            if spread:
                raise ValueError(
                    "collections: give either a comma-separated list of names or collections.<name>.* "
                    "settings, not both"
                )
            rest["collection_list"] = listed
        elif listed is not None:
            rest["collections"] = listed
        if spread:
            rest["collections"] = {**dict(rest.get("collections") or {}), **spread}
        return rest

    @field_validator("record_count")
    @classmethod
    def _check_record_count(cls, value: int) -> int:
        if value < -1:
            raise ValueError("must be >= 0 (0: unbounded, as in Conduit)")
        return -1 if value == 0 else value

    @field_validator("burst_sleep_time", "burst_generate_time", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return go_duration(str(value))

    @field_validator("collection_list")
    @classmethod
    def _normalise_collections(cls, value: str) -> str:
        return ",".join(comma_list(value))

    @model_validator(mode="after")
    def _read_time_as_rate(self) -> GeneratorSettings:
        if self.burst_sleep_time > 0 and self.burst_generate_time <= 0:
            raise ValueError('"burst.generateTime" should be greater than 0')
        if not self.read_time:
            return self
        seconds = go_duration(self.read_time)
        if seconds > 0 and self.rate > 0:
            raise ValueError(
                'cannot specify both "readTime" and "rate", "readTime" is deprecated, please only specify "rate"'
            )
        if seconds > 0:
            object.__setattr__(self, "rate", 1.0 / seconds)  # Conduit's rate.Every(readTime)
        return self

    def collection_configs(self) -> list[tuple[str, _Collection]]:
        """Each collection's name ("" for the default one) and its config, as Conduit's
        ``GetCollectionConfigs``: with ``collections.<name>.*`` the top-level format is a collection
        of its own only when ``format.type`` is given."""
        if self.collections:
            named: list[tuple[str, _Collection]] = sorted(self.collections.items())
            return ([("", self)] if "format_type" in self.model_fields_set else []) + named
        names = comma_list(self.collection_list)
        return [(name, self) for name in names] if names else [("", self)]

    @property
    def round_robin(self) -> bool:
        """The older list form takes collections in turn; Conduit's map picks one at random per record."""
        return not self.collections


SOURCE = PluginSpec(
    "builtin:generator",
    "source",
    GeneratorSettings,
    engine="airflow_conduit.engine.connectors.generator",
    spark_source="conduit_generator",
    replays_identically=True,
    inspectable=True,
)
