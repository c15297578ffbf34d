"""``standalone:nats`` settings as a Conduit file writes them: Conduit's names and defaults reach the
connectors' configs, mistakes are refused at load naming the setting, and credentials stay out of
messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_conduit.config import load_pipeline_text
from airflow_conduit.config.errors import ConfigError
from airflow_conduit.engine.connectors._stream import SourceContext
from airflow_conduit.engine.connectors.nats._common import Connection, redact
from airflow_conduit.engine.connectors.nats.source import NatsSource

FILE = """
version: "2.2"
pipelines:
  - id: p
    connectors:
      - id: in
        type: source
        plugin: nats
        settings:
          urls: "nats://alice:Pw-s3cret@127.0.0.1:4222, nats://127.0.0.1:4223"
          subject: orders
          stream: ORDERS
SOURCE      - id: out
        type: destination
        plugin: standalone:nats
        settings:
          urls: nats://127.0.0.1:4222
          subject: copies
DESTINATION"""


def load(source: str = "", destination: str = "") -> list:
    def block(text: str) -> str:
        return "".join(f"          {line.strip()}\n" for line in text.splitlines() if line.strip())

    text = FILE.replace("SOURCE", block(source)).replace("DESTINATION", block(destination))
    return load_pipeline_text(text, str(Path("p.yaml"))).pipelines[0].connectors


def test_conduit_names_and_defaults_reach_the_reader() -> None:
    source, destination = load()
    assert source.plugin == "standalone:nats" and destination.plugin == "standalone:nats"
    ctx = SourceContext("in", "p:in", stop_file="")
    config = NatsSource.for_source(source.settings, ctx)
    assert config.urls == ("nats://alice:Pw-s3cret@127.0.0.1:4222", "nats://127.0.0.1:4223")
    assert (config.deliver_policy, config.ack_policy, config.pull_size) == ("all", "explicit", 1024)
    assert (config.max_reconnects, config.reconnect_wait, config.name) == (5, 5.0, "in")
    assert config.durable == "conduit-p_in"  # stable across restarts, unlike Conduit's random default
    assert (destination.settings.retry_attempts, destination.settings.retry_wait) == (3, 5.0)
    tuned = load("durable: mine\nackPolicy: all\nreconnectWait: 250ms\nbufferSize: 100")[0]
    config = NatsSource.for_source(tuned.settings, ctx)
    assert (config.durable, config.ack_policy, config.reconnect_wait, config.pull_size) == (
        "mine",
        "all",
        0.25,
        100,
    )


@pytest.mark.parametrize(
    ("source", "destination", "expected"),
    [
        ("ackPolicy: sometimes", "", "ackPolicy"),
        ("deliverPolicy: last", "", "deliverPolicy"),
        ("bufferSize: 10", "", "bufferSize"),
        ("reconnectWait: soon", "", "not a Go duration"),
        ("", "retryAttempts: 0", "retryAttempts"),
        ("", "retryWait: -5s", "not a Go duration"),
        ("tls.clientCertPath: /etc/hostname", "", "tls.clientPrivateKeyPath is missing"),
        ("", "urls: http://127.0.0.1:4222", "not a NATS server URL"),
    ],
)
def test_mistakes_are_refused_at_load_naming_the_setting(
    source: str, destination: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(source, destination)
    message = str(caught.value)
    assert expected in message and "p.yaml" in message, message


def test_credentials_never_appear_in_messages() -> None:
    connection = Connection(urls=("nats://alice:Pw-s3cret@127.0.0.1:4222",))
    assert "Pw-s3cret" not in connection.shown and "alice" not in connection.shown
    text = redact("dial nats://alice:Pw-s3cret@127.0.0.1:4222 failed: Pw-s3cret", connection)
    assert "Pw-s3cret" not in text and "alice" not in text
