"""What a plugin is: its name, kind, settings model and capabilities (:class:`PluginSpec`).

Pure (pydantic, no Spark): the config layer validates a pipeline file with the specs alone. The module
that implements a plugin is named, not imported: the engine imports it when it runs the plugin
(:meth:`PluginSpec.implementation`). As in Conduit, where each connector declares its ``sdk.Connector``
and ``registry.go`` lists them, each plugin declares its spec in its own module under :mod:`.settings`,
and :mod:`.registry` lists the specs.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

PluginKind = Literal["source", "destination", "processor"]


class PluginSettings(BaseModel):
    """The base of every plugin's settings model.

    Fields have Python names; their aliases are Conduit's keys (``recordCount``). Frozen, like the rest
    of the validated pipeline file, and picklable: ``custom.python`` ships its settings to executors.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


@dataclass(frozen=True)
class PluginSpec:
    """One plugin of one kind (``builtin:file`` is two: a source and a destination)."""

    name: str
    kind: PluginKind
    settings_model: type[PluginSettings]
    engine: str
    """The module that implements the plugin, imported by the engine only. It has, by kind:

    - source: ``read_stream(spark, settings, ctx) -> DataFrame``, and ``stream_reader(settings, ctx)``
      (the Spark stream reader, for ``inspect``) when :attr:`inspectable`;
    - destination: ``stage(records, settings, delivery) -> Staged``, and ``delivered(settings,
      delivery) -> bool`` when :attr:`delivery_marker`;
    - processor: ``apply(records, proc) -> DataFrame``, or ``apply(records, proc, batch)`` when
      :attr:`batch_context`.
    """

    # Sources.
    spark_source: str = ""
    """The Spark data source's short name (``conduit_file``): a Spark failure naming it is the source's."""
    replays_identically: bool = False
    """The same rows, in the same partitions, whenever a batch's offsets are read again (byte ranges of
    append-only files; a pure function of seed and index), so a batch need not be stored to be decided
    once. A Postgres snapshot page read again may see rows changed since."""
    inspectable: bool = False
    """``airflow-conduit inspect`` can read a batch's records again through the stream reader."""

    # Destinations.
    delivery_marker: bool = False
    """Keeps a delivery marker with its data (exactly once): the engine asks ``delivered`` before it
    stages a batch. Without one (a log line, user code keeping its own) every replay writes again."""
    writes_on_stage: bool = False
    """``stage`` runs the batch's Spark job itself: the engine's record counts can ride on it."""
    bulk_writes: bool = False
    """Writes a micro-batch as one Spark write at hundreds of thousands of records a second, so a batch
    of a few million records stays a few seconds long (see ``UNSTORED_MAX_RECORDS_PER_BATCH``)."""

    # Processors.
    pure: bool = True
    """Gives the same result on the same record (its Spark plan is still checked, see
    ``engine.processors.is_pure``). User code may not (services that flake, random values)."""
    batch_context: bool = False
    """``apply`` takes the micro-batch's context as well."""
    fans_out: bool = False
    """May make several records of one (``split``, ``clone``): the pieces share the source record's
    ``_seq`` and are told apart by ``_piece`` (see :mod:`airflow_conduit.record`)."""

    def __post_init__(self) -> None:
        by_kind = {
            "source": ("spark_source", "replays_identically", "inspectable"),
            "destination": ("delivery_marker", "writes_on_stage", "bulk_writes"),
            "processor": ("batch_context", "fans_out"),
        }
        for kind, names in by_kind.items():
            given = [n for n in names if getattr(self, n)]
            if given and kind != self.kind:
                raise ValueError(f"{self.name} ({self.kind}): {', '.join(given)} is for {kind} plugins")
        if self.kind != "processor" and not self.pure:
            raise ValueError(f"{self.name} ({self.kind}): pure is for processor plugins")

    def implementation(self) -> ModuleType:
        """The module that implements the plugin (engine only: it imports Spark)."""
        return importlib.import_module(self.engine)


def known_settings(model: type[BaseModel]) -> list[str]:
    """The keys a settings model takes, as the user writes them (a map is spread over dotted keys)."""
    keys = set()
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key.startswith("sdk."):
            key = "sdk.*"  # the connector SDK's settings, one entry (docs/connectors.md lists them)
        keys.add(f"{key}.<field>" if typing.get_origin(info.annotation) is dict else key)
    return sorted(keys)


def _issue_message(error: Mapping[str, Any], spec: PluginSpec, key: str) -> str:
    kind = error["type"]
    if kind == "missing":
        return f"required setting {key!r} is missing"
    if kind == "extra_forbidden":
        known = known_settings(spec.settings_model)
        listed = f"known: {', '.join(known)}" if known else f"{spec.name} takes no settings"
        return f"unknown setting {key!r} for {spec.name} ({listed})"
    if kind == "string_too_short":
        return "must not be empty"
    message: str = error["msg"]
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    return f"{message} (got {error['input']!r})" if "input" in error else message


def validate_settings(
    spec: PluginSpec, raw: Mapping[str, str], base_dir: str | Path | None = None
) -> tuple[PluginSettings | None, list[tuple[str, str]]]:
    """Validate ``raw`` settings for ``spec``.

    Returns ``(settings, [])`` with the validated model (defaults filled), or ``(None, issues)`` where
    each issue is ``(setting key as the user wrote it or "", message)``.
    """
    try:
        model = spec.settings_model.model_validate(dict(raw), context={"base_dir": base_dir})
    except ValidationError as error:
        issues = []
        for item in error.errors():
            key = ".".join(str(part) for part in item["loc"])
            issues.append((key, _issue_message(item, spec, key)))
        return None, issues
    return model, []
