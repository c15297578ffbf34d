"""``sdk.record.format`` and ``sdk.record.format.options``: how a destination writes each record, as every
Conduit destination takes them (the connector SDK's ``DestinationWithRecordFormat``).

- ``opencdc/json`` (the default): the OpenCDC record as JSON;
- ``debezium/json``: a Debezium change event with its Kafka Connect schema; options
  ``debezium.schema.name=NAME`` and ``debezium.rawData.key=KEY`` (``opt=value`` pairs separated by ``,``);
- ``template``: the options are a Go template over the record (Sprig's functions, a missing map key is an
  error), parsed here so a bad one is refused at validate.

A destination that writes rows rather than serialized records refuses any format but the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator

from airflow_conduit.gotemplate import Template, TemplateSyntaxError

from ..spec import PluginSettings

DEFAULT_RECORD_FORMAT = "opencdc/json"
RECORD_FORMATS = ("debezium/json", "opencdc/json", "template")
"""The formats served, sorted as the SDK lists them in its message."""
DEBEZIUM_RAW_DATA_KEY = "opencdc.rawData"


def format_options(text: str) -> dict[str, str]:
    """The SDK's ``opt1=val1,opt2=val2`` (a key without ``=`` has the value ``""``; later keys win)."""
    text = text.strip()
    if not text:
        return {}
    options = {}
    for pair in text.split(","):
        key, _, value = pair.partition("=")
        options[key] = value
    return options


@dataclass(frozen=True)
class RecordFormat:
    """A validated record format, as the engine needs it (plain values: it travels to executors)."""

    name: str = DEFAULT_RECORD_FORMAT
    template: str = ""
    """``template``: the template's text."""
    schema_name: str = ""
    """``debezium/json``: the envelope schema's ``name`` (``debezium.schema.name``)."""
    raw_data_key: str = DEBEZIUM_RAW_DATA_KEY
    """``debezium/json``: the field that holds raw data that is not a JSON object (``debezium.rawData.key``)."""

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_RECORD_FORMAT


class RecordFormatSettings(PluginSettings):
    """The two settings, for every destination (:class:`._common.DestinationSettings`)."""

    RECORD_FORMAT_REFUSED: ClassVar[str] = ""
    """Why this destination takes only the default format (it writes rows, not serialized records)."""

    record_format: str = Field(default=DEFAULT_RECORD_FORMAT, alias="sdk.record.format")
    record_format_options: str = Field(default="", alias="sdk.record.format.options")

    @field_validator("record_format")
    @classmethod
    def _check_format(cls, value: str) -> str:
        if value not in RECORD_FORMATS:
            raise ValueError(
                f"record format {value!r} is not supported (supported: {', '.join(RECORD_FORMATS)})"
            )
        if value != DEFAULT_RECORD_FORMAT and cls.RECORD_FORMAT_REFUSED:
            raise ValueError(f"only {DEFAULT_RECORD_FORMAT} here: {cls.RECORD_FORMAT_REFUSED}")
        return value

    @field_validator("record_format_options")
    @classmethod
    def _check_options(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("record_format") == "template":
            try:
                Template.parse(value)
            except TemplateSyntaxError as error:
                raise ValueError(f"not a valid Go template: {error}") from None
        return value

    @property
    def output_format(self) -> RecordFormat:
        """The format with its options parsed (unknown options are ignored, as the SDK does)."""
        if self.record_format == "template":
            return RecordFormat("template", template=self.record_format_options)
        if self.record_format == "debezium/json":
            options = format_options(self.record_format_options)
            return RecordFormat(
                "debezium/json",
                schema_name=options.get("debezium.schema.name", ""),
                raw_data_key=options.get("debezium.rawData.key") or DEBEZIUM_RAW_DATA_KEY,
            )
        return RecordFormat()
