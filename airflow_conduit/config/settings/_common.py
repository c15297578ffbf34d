"""What the plugins' settings models share: required strings, the batch size, the destination namespace."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

from pydantic import Field, field_validator

from ..fieldref import FieldRef, parse_field_ref
from ..spec import PluginSettings

# Backpressure: the most records a source puts in one micro-batch (memory stays flat whatever the
# backlog). Large enough that the ~0.1-0.7 s fixed cost of a micro-batch stays small beside its work.
DEFAULT_MAX_RECORDS_PER_BATCH = 250_000

RequiredStr = Annotated[str, Field(min_length=1)]


def check_ref(value: str, *, forbid: Iterable[str] = (), setting: str = "field") -> FieldRef:
    ref = parse_field_ref(value)
    if ref.root in forbid:
        raise ValueError(f"{setting} cannot be {str(ref)}")
    return ref


def comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class DestinationSettings(PluginSettings):
    """What every destination takes."""

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
