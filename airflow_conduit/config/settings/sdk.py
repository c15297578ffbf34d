"""The ``sdk.*`` settings the Conduit connector SDK adds to every connector (its middleware), in one place.

Sources (the SDK's ``DefaultSourceMiddleware``): ``sdk.batch.size`` and ``sdk.batch.delay``
(``SourceWithBatch``), ``sdk.schema.extract.*`` (``SourceWithSchemaExtraction``) and
``sdk.schema.context.*`` (``SourceWithSchemaContext``). Destinations (``DefaultDestinationMiddleware``):
``sdk.batch.*`` and ``sdk.rate.*``; ``sdk.record.format*`` lives with the record formats.

What maps onto the engine is applied, what changes nothing here is accepted, the rest is refused at
validate saying why. Conduit itself refuses ``sdk.rate.*`` on a source ("unrecognized parameter"); so
do we, with a pointer to what does limit a source's rate.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..spec import PluginSettings
from ._duration import go_duration

# Backpressure: the most records a source puts in one micro-batch (memory stays flat whatever the
# backlog). Large enough that the ~0.1-0.7 s fixed cost of a micro-batch stays small beside its work.
DEFAULT_MAX_RECORDS_PER_BATCH = 250_000
# The default when nothing of a micro-batch is stored (pure processors, sources that replay a batch the
# same) and every destination writes in bulk (files): memory no longer grows with the batch, and fewer
# batches pay the fixed cost fewer times (peers.py's job, whole processes: 1M records 16.9 -> 14.7 s,
# 10M 75 -> 62 s with 1M-record batches; 10M 30.6-31.0 -> 27.1-28.4 s with 2.5M, 27.3 s with 5M, the
# process tree's peak the same 688-692 MiB).
UNSTORED_MAX_RECORDS_PER_BATCH = 2_500_000

_NO_REGISTRY = "there is no schema registry here (no schema is extracted or registered)"
# Schema settings that only name things in a schema registry: their defaults are all that can hold here.
_REGISTRY_DEFAULTS = {
    "sdk_schema_extract_payload_subject": "payload",
    "sdk_schema_extract_key_subject": "key",
    "sdk_schema_context_name": "",
}


def _duration(value: Any) -> float:
    """A Go duration setting (``100ms``) in seconds (a negative one is refused by the parser)."""
    return go_duration(str(value))


class SourceSdkSettings(PluginSettings):
    """What every source takes: the admission limit, and the SDK's source middleware settings."""

    max_records_per_batch: int = Field(
        default=DEFAULT_MAX_RECORDS_PER_BATCH, ge=1, alias="maxRecordsPerBatch"
    )
    """Extension: the most records one micro-batch admits from this source."""

    sdk_batch_size: int = Field(default=0, ge=0, alias="sdk.batch.size")
    """Conduit: the most records the source hands on in one batch (0: one at a time). Here: the most
    records one micro-batch admits (``maxRecordsPerBatch``); 0 keeps the default."""
    sdk_batch_delay: float = Field(default=0.0, alias="sdk.batch.delay")
    """Conduit: how long a batch may wait to fill. A micro-batch here never waits to fill (it takes what
    the source holds when it starts), so any delay bound holds: accepted, changes nothing."""

    sdk_rate_per_second: None = Field(default=None, alias="sdk.rate.perSecond", exclude=True)
    sdk_rate_burst: None = Field(default=None, alias="sdk.rate.burst", exclude=True)

    sdk_schema_extract_type: Literal["avro"] = Field(default="avro", alias="sdk.schema.extract.type")
    sdk_schema_extract_payload_enabled: bool = Field(default=True, alias="sdk.schema.extract.payload.enabled")
    sdk_schema_extract_payload_subject: str = Field(
        default="payload", alias="sdk.schema.extract.payload.subject"
    )
    sdk_schema_extract_key_enabled: bool = Field(default=True, alias="sdk.schema.extract.key.enabled")
    sdk_schema_extract_key_subject: str = Field(default="key", alias="sdk.schema.extract.key.subject")
    sdk_schema_context_enabled: bool = Field(default=True, alias="sdk.schema.context.enabled")
    sdk_schema_context_name: str = Field(default="", alias="sdk.schema.context.name")

    @property
    def batch_limit_given(self) -> bool:
        """The pipeline file sets the records per micro-batch (else the engine picks the default)."""
        return "max_records_per_batch" in self.model_fields_set or self.sdk_batch_size > 0

    @field_validator("sdk_batch_delay", mode="before")
    @classmethod
    def _check_delay(cls, value: Any) -> float:
        return _duration(value)

    @field_validator("sdk_rate_per_second", "sdk_rate_burst", mode="before")
    @classmethod
    def _refuse_source_rate(cls, value: Any) -> None:
        raise ValueError(
            "not supported on a source: sdk.rate.* is a destination setting in Conduit (a source refuses "
            "it as an unrecognized parameter); limit a source with its own setting (the generator's "
            "`rate`) or a destination's sdk.rate.perSecond"
        )

    @field_validator(
        "sdk_schema_extract_payload_subject", "sdk_schema_extract_key_subject", "sdk_schema_context_name"
    )
    @classmethod
    def _registry_defaults(cls, value: str, info: ValidationInfo) -> str:
        default = _REGISTRY_DEFAULTS[str(info.field_name)]
        if value != default:
            raise ValueError(f"not supported: only its default {default!r} is accepted; {_NO_REGISTRY}")
        return value

    @model_validator(mode="after")
    def _batch_size_is_admission(self) -> Any:
        """``sdk.batch.size`` is the records-per-micro-batch admission limit, unless it contradicts an
        explicit ``maxRecordsPerBatch``."""
        size = self.sdk_batch_size
        if size <= 0 or size == self.max_records_per_batch:
            return self
        if "max_records_per_batch" in self.model_fields_set:
            raise ValueError(
                f"sdk.batch.size ({size}) and maxRecordsPerBatch ({self.max_records_per_batch}) disagree: "
                "both set the records per micro-batch; give one"
            )
        object.__setattr__(self, "max_records_per_batch", size)
        return self


class DestinationSdkSettings(PluginSettings):
    """What every destination takes from the SDK's destination middleware (record formats aside)."""

    sdk_batch_size: int = Field(default=0, ge=0, alias="sdk.batch.size")
    """Conduit: records per write. Here a destination writes a micro-batch in one go and acks it as a
    whole, as Conduit acks a batch: accepted, changes nothing."""
    sdk_batch_delay: float = Field(default=0.0, alias="sdk.batch.delay")
    sdk_rate_per_second: float = Field(default=0.0, ge=0, alias="sdk.rate.perSecond")
    sdk_rate_burst: int = Field(default=0, ge=0, alias="sdk.rate.burst")
    """Takes effect only with ``sdk.rate.perSecond`` (Conduit), so any value is accepted."""

    @field_validator("sdk_batch_delay", mode="before")
    @classmethod
    def _check_delay(cls, value: Any) -> float:
        return _duration(value)

    @field_validator("sdk_rate_per_second")
    @classmethod
    def _refuse_rate(cls, value: float) -> float:
        if value > 0:
            raise ValueError(
                "not supported: a destination here writes a whole micro-batch at once and cannot pace "
                "its writes; limit the source instead (the generator's `rate`, or sdk.batch.size for "
                "smaller micro-batches). Only 0 (no limit, the default) is accepted"
            )
        return value
