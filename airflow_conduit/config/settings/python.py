"""``custom.python``, a processor and a destination calling the user's function: settings and specs."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationInfo, field_validator

from ..spec import PluginSettings, PluginSpec
from ._common import DestinationSettings

_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


class CustomPythonSettings(PluginSettings):
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


class PythonDestinationSettings(CustomPythonSettings, DestinationSettings):
    """``custom.python`` as a destination: ``function(records, delivery_hash)`` per micro-batch."""

    RECORD_FORMAT_REFUSED: ClassVar[str] = (
        "a custom.python destination gets the records as dicts, not serialized; serialize them in the function"
    )


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


PROCESSOR = PluginSpec(
    "custom.python",
    "processor",
    CustomPythonSettings,
    engine="airflow_conduit.engine.processors.custom_python",
    pure=False,  # user code: a replay of a batch cannot recompute its decision (engine/decisions.py)
    batch_context=True,
)
# The user's function gets the delivery hash and keeps its own marker: the engine keeps none.
DESTINATION = PluginSpec(
    "custom.python",
    "destination",
    PythonDestinationSettings,
    engine="airflow_conduit.engine.connectors.python",
)
