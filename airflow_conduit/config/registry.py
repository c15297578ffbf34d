"""The plugin registry: every plugin's spec, in one list (Conduit's ``registry.go``).

A plugin is a settings model and a spec in its own module under :mod:`.settings`, an engine module named
by the spec, and one line below. Pure, like the specs: the config layer reads it without Spark.
"""

from __future__ import annotations

from .settings import (
    fanout,
    file,
    generator,
    javascript,
    log,
    postgres,
    processors,
    python,
    rabbitmq,
    redis,
    s3,
    webhook,
)
from .settings import nats as nats_settings
from .spec import PluginKind, PluginSpec

BUILTIN: tuple[PluginSpec, ...] = (
    generator.SOURCE,
    file.SOURCE,
    file.DESTINATION,
    log.DESTINATION,
    postgres.SOURCE,
    postgres.DESTINATION,
    rabbitmq.SOURCE,
    rabbitmq.DESTINATION,
    python.DESTINATION,
    nats_settings.SOURCE,
    nats_settings.DESTINATION,
    redis.SOURCE,
    redis.DESTINATION,
    s3.SOURCE,
    s3.DESTINATION,
    processors.FIELD_SET,
    processors.FIELD_RENAME,
    processors.FIELD_EXCLUDE,
    processors.FIELD_CONVERT,
    processors.FILTER,
    processors.JSON_DECODE,
    processors.JSON_ENCODE,
    processors.ERROR,
    processors.BASE64_ENCODE,
    processors.BASE64_DECODE,
    processors.UNWRAP_OPENCDC,
    processors.UNWRAP_DEBEZIUM,
    processors.UNWRAP_KAFKACONNECT,
    webhook.WEBHOOK_HTTP,
    fanout.CLONE,
    fanout.SPLIT,
    python.PROCESSOR,
    javascript.PROCESSOR,
)


def _by_name(specs: tuple[PluginSpec, ...]) -> dict[str, dict[PluginKind, PluginSpec]]:
    registry: dict[str, dict[PluginKind, PluginSpec]] = {}
    for spec in specs:
        kinds = registry.setdefault(spec.name, {})
        if spec.kind in kinds:
            raise ValueError(f"plugin {spec.name!r} is registered twice as a {spec.kind}")
        kinds[spec.kind] = spec
    return registry


PLUGINS: dict[str, dict[PluginKind, PluginSpec]] = _by_name(BUILTIN)
"""Plugin name -> kind -> spec (``builtin:file`` is both a source and a destination)."""


def plugin_spec(name: str, kind: PluginKind) -> PluginSpec | None:
    return PLUGINS.get(name, {}).get(kind)


def spec_of(name: str, kind: PluginKind) -> PluginSpec:
    """The spec of a plugin that the loader accepted (the engine's lookup: a miss is a bug)."""
    spec = plugin_spec(name, kind)
    if spec is None:
        raise KeyError(f"no {kind} plugin {name!r} (known: {', '.join(plugin_names(kind))})")
    return spec


def plugin_names(*kinds: PluginKind) -> list[str]:
    """Sorted names of the plugins that have at least one of ``kinds``."""
    return sorted(name for name, by_kind in PLUGINS.items() if any(k in by_kind for k in kinds))


def spark_sources() -> list[str]:
    """The Spark data source short names of the sources (``conduit_file``, ...)."""
    return sorted(spec.spark_source for spec in BUILTIN if spec.spark_source)
