"""The postgres source's settings as Conduit's files write them: what maps is accepted (and reaches the
reader's config), what does not is refused saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_conduit.config import load_pipeline_text
from airflow_conduit.config.errors import ConfigError
from airflow_conduit.engine.connectors.postgres.tables import Config

FILE = """
version: "2.2"
pipelines:
  - id: p
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings:
          url: postgresql://u:p@localhost/db
          tables: "orders,customers"
SETTINGS      - {id: out, type: destination, plugin: builtin:log}
"""


def load(settings: str = "") -> Config:
    lines = "".join(f"          {line.strip()}\n" for line in settings.splitlines() if line.strip())
    loaded = load_pipeline_text(FILE.replace("SETTINGS", lines), str(Path("p.yaml")))
    return Config.from_settings(loaded.pipelines[0].connectors[0].settings)  # type: ignore[arg-type]


def test_conduit_defaults() -> None:
    config = load()
    assert (config.publication, config.slot, config.plugin) == ("conduitpub", "conduitslot", "auto")
    assert config.fetch_size == 50_000 and config.snapshot and config.mode == "logrepl"
    assert config.tables == ("orders", "customers")


def test_conduit_settings_as_strings() -> None:
    config = load(
        """
        logrepl.publicationName: "Shop Pub"
        logrepl.slotName: "shop_slot"
        logrepl.autoCleanup: "false"
        logrepl.withAvroSchema: "false"
        snapshot.fetchSize: "1000"
        snapshotMode: never
        cdcMode: auto
        """
    )
    assert (config.publication, config.slot, config.fetch_size) == ("Shop Pub", "shop_slot", 1000)
    assert not config.snapshot


@pytest.mark.parametrize("plugin", ["pgoutput", "test_decoding"])
def test_the_plugin_extension(plugin: str) -> None:
    assert load(f"logrepl.plugin: {plugin}").plugin == plugin


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ('logrepl.withAvroSchema: "true"', "logrepl.withAvroSchema: true is not supported"),
        ("logrepl.plugin: wal2json", "logrepl.plugin"),
        ('logrepl.publicationName: ""', "logrepl.publicationName"),
        ("snapshot.fetchSize: 0", "snapshot.fetchSize"),
    ],
)
def test_what_does_not_map_is_refused(settings: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(settings)
    assert message in str(caught.value)
