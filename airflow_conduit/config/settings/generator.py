"""``builtin:generator``: its settings and its spec."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...record import OPERATIONS
from ..spec import PluginSettings, PluginSpec
from ._common import DEFAULT_MAX_RECORDS_PER_BATCH, comma_list, gather_prefixed, go_duration

FieldType = Literal["int", "string", "bool", "time", "duration"]
_FORMAT_OPTIONS = "format.options"


def _default_fields() -> dict[str, FieldType]:
    return {"id": "int", "name": "string"}


class GeneratorSettings(PluginSettings):
    record_count: int = Field(-1, alias="recordCount")
    """Records to produce; 0 (Conduit's spelling) or -1 means unbounded."""
    rate: float = Field(0.0, ge=0)
    """Records per second; 0 means no limit."""
    read_time: str = Field("", alias="readTime", exclude=True)
    """Conduit's deprecated spelling of the rate: the time one record takes (a Go duration)."""
    collections: str = ""
    operations: str = "create"
    format_type: Literal["structured", "raw"] = Field("structured", alias="format.type")
    format_options: dict[str, FieldType] = Field(default_factory=_default_fields, alias="format.options")
    """Field name -> type; written as ``format.options.<field>: <type>`` keys, as in Conduit."""
    seed: int = 0
    max_records_per_batch: int = Field(DEFAULT_MAX_RECORDS_PER_BATCH, ge=1, alias="maxRecordsPerBatch")

    @model_validator(mode="before")
    @classmethod
    def _collect_format_options(cls, data: Any) -> Any:
        return gather_prefixed(data, _FORMAT_OPTIONS)

    @field_validator("record_count")
    @classmethod
    def _check_record_count(cls, value: int) -> int:
        if value < -1:
            raise ValueError("must be >= 0 (0: unbounded, as in Conduit)")
        return -1 if value == 0 else value

    @model_validator(mode="after")
    def _read_time_as_rate(self) -> GeneratorSettings:
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

    @field_validator("collections")
    @classmethod
    def _normalise_collections(cls, value: str) -> str:
        return ",".join(comma_list(value))

    @field_validator("operations")
    @classmethod
    def _check_operations(cls, value: str) -> str:
        ops = comma_list(value)
        bad = [op for op in ops if op not in OPERATIONS]
        if bad or not ops:
            raise ValueError(f"must be a comma-separated list of {', '.join(OPERATIONS)}; got {value!r}")
        return ",".join(ops)


SOURCE = PluginSpec(
    "builtin:generator",
    "source",
    GeneratorSettings,
    engine="airflow_conduit.engine.connectors.generator",
    spark_source="conduit_generator",
    replays_identically=True,
    inspectable=True,
)
