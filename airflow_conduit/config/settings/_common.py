"""What the plugins' settings models share: required strings, the batch size, the destination namespace."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator

from airflow_conduit.gotemplate import Template, TemplateSyntaxError, is_template

from ..fieldref import FieldRef, parse_field_ref
from ._duration import go_duration as go_duration
from .record_format import RecordFormatSettings
from .sdk import DEFAULT_MAX_RECORDS_PER_BATCH as DEFAULT_MAX_RECORDS_PER_BATCH
from .sdk import UNSTORED_MAX_RECORDS_PER_BATCH as UNSTORED_MAX_RECORDS_PER_BATCH
from .sdk import DestinationSdkSettings

RequiredStr = Annotated[str, Field(min_length=1)]


def _check_template(value: str) -> str:
    """A Conduit setting that is a Go template: it must parse (its functions defined), else the file is
    refused at validate with the template's own message."""
    if is_template(value):
        try:
            Template.parse(value)
        except TemplateSyntaxError as error:
            raise ValueError(f"not a valid Go template: {error}") from None
    return value


GoTemplateText = Annotated[str, AfterValidator(_check_template)]
"""A setting Conduit evaluates as a Go template per record (``field.set`` ``value``, ``error``
``message``); text without ``{{`` is itself."""


def check_ref(value: str, *, forbid: Iterable[str] = (), setting: str = "field") -> FieldRef:
    ref = parse_field_ref(value)
    if ref.root in forbid:
        raise ValueError(f"{setting} cannot be {str(ref)}")
    return ref


def comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class DestinationSettings(DestinationSdkSettings, RecordFormatSettings):
    """What every destination takes: the SDK's settings (:mod:`.sdk`, ``sdk.record.format``:
    :mod:`.record_format`)."""

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


def gather_prefixed(data: Any, prefix: str) -> Any:
    """Conduit spreads a map over dynamic keys (``format.options.<field>``, ``headers.<Name>``): gather
    ``prefix.<name>`` keys into one ``prefix`` map, so the model can check them as one field."""
    if not isinstance(data, Mapping):
        return data
    head = prefix + "."
    spread = {k[len(head) :]: v for k, v in data.items() if isinstance(k, str) and k.startswith(head)}
    if not spread:
        return data
    rest = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(head))}
    rest[prefix] = {**dict(rest.get(prefix) or {}), **spread}
    return rest
