"""The builtin processors (Spark SQL over the record, one engine module each): settings and specs."""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, field_validator

from airflow_conduit.gotemplate import is_template

from ...record import OPERATIONS
from ..fieldref import parse_field_list, parse_field_ref, parse_rename_mapping
from ..spec import PluginSettings, PluginSpec
from ._common import GoTemplateText, RequiredStr, check_ref

_ENGINE = "airflow_conduit.engine.processors."


class FieldSetSettings(PluginSettings):
    field: str
    value: GoTemplateText

    @field_validator("field")
    @classmethod
    def _check_field(cls, value: str) -> str:
        check_ref(value, forbid=("position",))
        return value.strip()

    @field_validator("value")
    @classmethod
    def _check_operation_value(cls, value: str, info: ValidationInfo) -> str:
        # Runs after `field` (declaration order); `field` is absent from info.data when it was invalid.
        target = info.data.get("field")
        fixed = not is_template(value)  # a template's value is known per record only
        if target and fixed and parse_field_ref(target).root == "operation" and value not in OPERATIONS:
            raise ValueError(f"value for .Operation must be one of {', '.join(OPERATIONS)}; got {value!r}")
        return value


class FieldRenameSettings(PluginSettings):
    mapping: RequiredStr
    """``ref:newName,ref2:newName2``; parse with :func:`fieldref.parse_rename_mapping`."""

    @field_validator("mapping")
    @classmethod
    def _check_mapping(cls, value: str) -> str:
        parse_rename_mapping(value)
        return value


class FieldExcludeSettings(PluginSettings):
    fields: RequiredStr
    """Comma-separated references; parse with :func:`fieldref.parse_field_list`."""

    @field_validator("fields")
    @classmethod
    def _check_fields(cls, value: str) -> str:
        for ref in parse_field_list(value):
            if ref.root in ("position", "operation"):
                raise ValueError(f"cannot exclude {str(ref)}")
        return value


class FieldSettings(PluginSettings):
    """A processor acting on one field, which may be anything but ``.Position``."""

    field: str

    @field_validator("field")
    @classmethod
    def _check_field(cls, value: str) -> str:
        check_ref(value, forbid=("position",))
        return value.strip()


class FieldConvertSettings(FieldSettings):
    type: Literal["string", "int", "float", "bool", "time"]

    @field_validator("type")
    @classmethod
    def _check_time_target(cls, value: str, info: ValidationInfo) -> str:
        # Conduit converts only .Key and .Payload fields; metadata (strings only) cannot hold a time.
        target = info.data.get("field")
        if value == "time" and target and parse_field_ref(target).root not in ("key", "before", "after"):
            raise ValueError(f"type time converts a .Key or .Payload field, not {target}")
        return value


class FilterSettings(PluginSettings):
    pass


class JsonDecodeSettings(FieldSettings):
    pass


class JsonEncodeSettings(FieldSettings):
    pass


class Base64Settings(FieldSettings):
    pass


class UnwrapOpenCDCSettings(PluginSettings):
    field: str = ".Payload.After"
    """The field that holds the OpenCDC record (structured, or JSON as text or raw data)."""

    @field_validator("field")
    @classmethod
    def _check_field(cls, value: str) -> str:
        check_ref(value, forbid=("position", "operation"))
        return value.strip()


class UnwrapPayloadSettings(PluginSettings):
    field: str = ".Payload.After"
    """The field that holds the wrapped event (a field under ``.Payload``)."""

    @field_validator("field")
    @classmethod
    def _check_field(cls, value: str) -> str:
        ref = check_ref(value)
        if ref.root not in ("before", "after"):
            raise ValueError(f"field must be under .Payload; got {value!r}")
        return value.strip()


class ErrorSettings(PluginSettings):
    message: GoTemplateText = "error processor triggered"


FIELD_SET = PluginSpec("field.set", "processor", FieldSetSettings, engine=_ENGINE + "field_set")
FIELD_RENAME = PluginSpec("field.rename", "processor", FieldRenameSettings, engine=_ENGINE + "field_rename")
FIELD_EXCLUDE = PluginSpec(
    "field.exclude", "processor", FieldExcludeSettings, engine=_ENGINE + "field_exclude"
)
FIELD_CONVERT = PluginSpec(
    "field.convert", "processor", FieldConvertSettings, engine=_ENGINE + "field_convert"
)
FILTER = PluginSpec("filter", "processor", FilterSettings, engine=_ENGINE + "filter")
JSON_DECODE = PluginSpec("json.decode", "processor", JsonDecodeSettings, engine=_ENGINE + "json_decode")
JSON_ENCODE = PluginSpec("json.encode", "processor", JsonEncodeSettings, engine=_ENGINE + "json_encode")
ERROR = PluginSpec("error", "processor", ErrorSettings, engine=_ENGINE + "error")
BASE64_ENCODE = PluginSpec("base64.encode", "processor", Base64Settings, engine=_ENGINE + "base64_encode")
UNWRAP_OPENCDC = PluginSpec(
    "unwrap.opencdc", "processor", UnwrapOpenCDCSettings, engine=_ENGINE + "unwrap_opencdc"
)
UNWRAP_DEBEZIUM = PluginSpec(
    "unwrap.debezium", "processor", UnwrapPayloadSettings, engine=_ENGINE + "unwrap_debezium"
)
UNWRAP_KAFKACONNECT = PluginSpec(
    "unwrap.kafkaconnect", "processor", UnwrapPayloadSettings, engine=_ENGINE + "unwrap_kafkaconnect"
)
BASE64_DECODE = PluginSpec("base64.decode", "processor", Base64Settings, engine=_ENGINE + "base64_decode")
