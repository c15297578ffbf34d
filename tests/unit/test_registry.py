"""The plugin registry: every spec's engine module has what its kind and capabilities promise."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from pyspark.sql.datasource import DataSource

from airflow_conduit.config.registry import BUILTIN, PLUGINS, plugin_names, spark_sources, spec_of
from airflow_conduit.config.settings import DestinationSettings
from airflow_conduit.config.spec import PluginSettings, PluginSpec

NEEDS = {
    "source": ("read_stream",),
    "destination": ("stage",),
    "processor": ("apply",),
}


@pytest.mark.parametrize("spec", BUILTIN, ids=lambda s: f"{s.kind}:{s.name}")
def test_a_spec_s_module_has_what_the_spec_promises(spec: PluginSpec) -> None:
    module = spec.implementation()
    needed = list(NEEDS[spec.kind])
    needed += ["stream_reader"] if spec.inspectable else []
    needed += ["delivered"] if spec.delivery_marker else []
    missing = [name for name in needed if not callable(getattr(module, name, None))]
    assert not missing, f"{spec.engine} lacks {missing}"
    if spec.kind == "processor":
        takes_batch = len(inspect.signature(module.apply).parameters) == 3
        assert takes_batch == spec.batch_context
    if spec.kind == "destination":
        assert issubclass(spec.settings_model, DestinationSettings)  # every destination has a namespace


@pytest.mark.parametrize("spec", [s for s in BUILTIN if s.kind == "source"], ids=lambda s: s.name)
def test_a_source_s_spark_name_is_its_data_source_s(spec: PluginSpec) -> None:
    module = spec.implementation()
    sources = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, DataSource) and value is not DataSource
    ]
    assert [s.name() for s in sources] == [spec.spark_source]


def test_lookups():
    assert spark_sources() == [
        "conduit_file",
        "conduit_generator",
        "conduit_nats",
        "conduit_postgres",
        "conduit_rabbitmq",
        "conduit_redis",
        "conduit_s3",
    ]
    assert plugin_names("source") == [
        "builtin:file",
        "builtin:generator",
        "builtin:postgres",
        "builtin:s3",
        "standalone:nats",
        "standalone:rabbitmq",
        "standalone:redis",
    ]
    assert set(PLUGINS["custom.python"]) == {"processor", "destination"}
    assert spec_of("builtin:log", "destination").settings_model.__name__ == "LogDestinationSettings"
    with pytest.raises(KeyError, match="no source plugin 'builtin:log'"):
        spec_of("builtin:log", "source")


def test_a_capability_of_another_kind_is_refused():
    with pytest.raises(ValueError, match="delivery_marker is for destination plugins"):
        PluginSpec("x", "source", PluginSettings, engine="x", delivery_marker=True)


def test_the_config_layer_reads_the_registry_without_spark():
    """The specs name their engine modules; validating a pipeline file imports none of them."""
    code = (
        "import sys, json\n"
        "from airflow_conduit.config import load_pipeline_text\n"
        'load_pipeline_text(\'version: "2.2"\\npipelines:\\n  - id: p\\n    connectors:\\n'
        "      - {id: g, type: source, plugin: builtin:generator}\\n"
        "      - {id: o, type: destination, plugin: builtin:log}\\n')\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
    assert not [m for m in loaded if m.startswith(("pyspark", "airflow_conduit.engine"))]
