"""``builtin:log`` (a destination, and the default DLQ): its settings and spec."""

from __future__ import annotations

from typing import Literal

from ..spec import PluginSpec
from ._common import DestinationSettings


class LogDestinationSettings(DestinationSettings):
    level: Literal["debug", "info", "warn", "error"] = "info"
    message: str = ""


# A log line cannot carry a delivery marker: at least once.
DESTINATION = PluginSpec(
    "builtin:log", "destination", LogDestinationSettings, engine="airflow_conduit.engine.connectors.log"
)
