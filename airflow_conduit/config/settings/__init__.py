"""Plugin settings: one pydantic model per builtin plugin, each beside its plugin's spec.

Conduit's settings are ``map[string]string``; the loader hands every value over as a string and the models
coerce laxly (``"10"`` -> 10). Keys keep Conduit's spelling (aliases such as ``recordCount`` and
``format.type``). The validated model itself is kept on the config objects, and the engine reads its
fields typed (``settings.record_count``).
"""

from __future__ import annotations

from ..spec import PluginSettings, known_settings, validate_settings
from ._common import DEFAULT_MAX_RECORDS_PER_BATCH, UNSTORED_MAX_RECORDS_PER_BATCH, DestinationSettings
from .file import FileDestinationSettings, FileSourceSettings
from .generator import FieldType, GeneratorSettings
from .log import LogDestinationSettings
from .postgres import PostgresDestinationSettings, PostgresSourceSettings
from .processors import (
    ErrorSettings,
    FieldConvertSettings,
    FieldExcludeSettings,
    FieldRenameSettings,
    FieldSetSettings,
    FieldSettings,
    FilterSettings,
    JsonDecodeSettings,
    JsonEncodeSettings,
)
from .python import CustomPythonSettings, PythonDestinationSettings, check_python_function

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_BATCH",
    "UNSTORED_MAX_RECORDS_PER_BATCH",
    "CustomPythonSettings",
    "DestinationSettings",
    "ErrorSettings",
    "FieldConvertSettings",
    "FieldExcludeSettings",
    "FieldRenameSettings",
    "FieldSetSettings",
    "FieldSettings",
    "FieldType",
    "FileDestinationSettings",
    "FileSourceSettings",
    "FilterSettings",
    "GeneratorSettings",
    "JsonDecodeSettings",
    "JsonEncodeSettings",
    "LogDestinationSettings",
    "PluginSettings",
    "PostgresDestinationSettings",
    "PostgresSourceSettings",
    "PythonDestinationSettings",
    "check_python_function",
    "known_settings",
    "validate_settings",
]
