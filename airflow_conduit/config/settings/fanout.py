"""``clone`` and ``split``: processors that make several records of one (Conduit's ``MultiRecord``).

Conduit runs them only under its pipeline architecture v2; here they always run. The pieces of a record
are acked and nacked as that record (see ``_piece`` in :mod:`airflow_conduit.record`).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from ..spec import PluginSettings, PluginSpec
from ._common import check_ref

_ENGINE = "airflow_conduit.engine.processors."


class CloneSettings(PluginSettings):
    count: int = Field(gt=0)
    """Clones per record: ``count: 2`` makes three records (``clone.index`` 0, 1, 2)."""


class SplitSettings(PluginSettings):
    field: str
    """An array in structured data under ``.Key`` or ``.Payload``: one record per element."""

    @field_validator("field")
    @classmethod
    def _check_field(cls, value: str) -> str:
        ref = check_ref(value)
        if ref.root not in ("key", "before", "after"):
            raise ValueError(f"field must be under .Key or .Payload (an array to split); got {value!r}")
        return value.strip()


CLONE = PluginSpec("clone", "processor", CloneSettings, engine=_ENGINE + "clone", fans_out=True)
SPLIT = PluginSpec("split", "processor", SplitSettings, engine=_ENGINE + "split", fans_out=True)
