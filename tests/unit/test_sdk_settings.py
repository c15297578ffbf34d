"""The connector SDK's ``sdk.*`` settings (conduit-connector-sdk ``source_middleware.go`` and
``destination_middleware.go``): applied where they map onto the engine, accepted where they change
nothing here, refused at validate with the setting and the reason where they do not map."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from airflow_conduit.config import ConfigError, load_pipeline_text
from airflow_conduit.config.registry import BUILTIN
from airflow_conduit.config.settings import DEFAULT_MAX_RECORDS_PER_BATCH
from airflow_conduit.config.spec import PluginSpec, validate_settings

SOURCES = [spec for spec in BUILTIN if spec.kind == "source"]
DESTINATIONS = [spec for spec in BUILTIN if spec.kind == "destination"]
REQUIRED = {
    "builtin:file": {"path": "/tmp/x"},
    "builtin:postgres": {"url": "postgresql://u:p@localhost:5432/db", "tables": "t", "table": "t"},
    "custom.python": {"function": "json:dumps"},
    "standalone:redis": {"redis.key": "k", "mode": "stream"},
    "standalone:nats": {"urls": "nats://127.0.0.1:4222", "subject": "s", "stream": "S"},
    "standalone:rabbitmq": {"url": "amqp://127.0.0.1:5672", "queue.name": "q"},
    "builtin:s3": {
        "aws.accessKeyId": "id",
        "aws.secretAccessKey": "secret",
        "aws.region": "us-east-1",
        "aws.bucket": "b",
        "format": "json",
    },
}


def required(spec: PluginSpec) -> dict[str, str]:
    given = dict(REQUIRED.get(spec.name, {}))
    if spec.name == "builtin:postgres":  # the source takes tables, the destination table
        given.pop("table" if spec.kind == "source" else "tables")
    if spec.name == "builtin:s3" and spec.kind == "source":  # format is the destination's
        given.pop("format")
    if spec.name == "standalone:nats" and spec.kind == "destination":  # stream is the source's
        given.pop("stream")
    return given


def validated(spec: PluginSpec, **given: Any) -> Any:
    settings, problems = validate_settings(spec, {**required(spec), **given})
    assert not problems, problems
    return settings


def refused(spec: PluginSpec, **given: Any) -> dict[str, str]:
    settings, problems = validate_settings(spec, {**required(spec), **given})
    assert settings is None
    return dict(problems)


def test_every_source_plugin_takes_the_sdk_source_settings():
    assert {spec.name for spec in SOURCES} >= {"builtin:generator", "builtin:file", "builtin:postgres"}


@pytest.mark.parametrize("spec", SOURCES, ids=lambda s: s.name)
def test_source_batch_size_is_the_records_per_micro_batch(spec):
    """Conduit's sdk.batch.size: the most records the source hands on at once; here the admission
    limit of a micro-batch. 0 (Conduit's default: no batching) keeps the engine's default."""
    assert validated(spec, **{"sdk.batch.size": "25"}).max_records_per_batch == 25
    assert validated(spec, **{"sdk.batch.size": "0"}).max_records_per_batch == DEFAULT_MAX_RECORDS_PER_BATCH
    assert validated(spec, **{"sdk.batch.size": "25", "maxRecordsPerBatch": "25"}).max_records_per_batch == 25
    problems = refused(spec, **{"sdk.batch.size": "25", "maxRecordsPerBatch": "30"})
    assert "disagree" in problems[""]
    assert "sdk.batch.size" in refused(spec, **{"sdk.batch.size": "-1"})


@pytest.mark.parametrize("spec", SOURCES, ids=lambda s: s.name)
def test_source_batch_delay_and_schema_defaults_accepted(spec):
    settings = validated(
        spec,
        **{
            "sdk.batch.delay": "10ms",
            "sdk.schema.extract.type": "avro",
            "sdk.schema.extract.payload.enabled": "true",
            "sdk.schema.extract.payload.subject": "payload",
            "sdk.schema.extract.key.enabled": "false",  # no extraction: what happens here anyway
            "sdk.schema.extract.key.subject": "key",
            "sdk.schema.context.enabled": "false",
            "sdk.schema.context.name": "",
        },
    )
    assert settings.sdk_batch_delay == pytest.approx(0.01)
    assert settings.sdk_schema_extract_key_enabled is False
    assert "sdk.batch.delay" in refused(spec, **{"sdk.batch.delay": "soon"})


@pytest.mark.parametrize("spec", SOURCES, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("sdk.rate.perSecond", "10", "destination setting in Conduit"),
        ("sdk.rate.burst", "5", "destination setting in Conduit"),
        ("sdk.schema.extract.payload.subject", "orders", "no schema registry"),
        ("sdk.schema.extract.key.subject", "k", "no schema registry"),
        ("sdk.schema.context.name", "ctx", "no schema registry"),
        ("sdk.schema.extract.type", "json", "avro"),  # Conduit's own validation: inclusion=avro
    ],
)
def test_source_sdk_settings_that_do_not_map_are_refused_saying_why(spec, key, value, reason):
    problems = refused(spec, **{key: value})
    assert list(problems) == [key]
    assert reason in problems[key]


def test_unknown_sdk_setting_is_unknown():
    (generator,) = [s for s in SOURCES if s.name == "builtin:generator"]
    problems = refused(generator, **{"sdk.batch.sizes": "10"})
    assert "unknown setting 'sdk.batch.sizes'" in problems["sdk.batch.sizes"]
    assert "sdk.*" in problems["sdk.batch.sizes"]  # the known list names the SDK's settings once


@pytest.mark.parametrize("spec", DESTINATIONS, ids=lambda s: f"{s.name}")
def test_destination_batch_and_zero_rate_accepted_a_rate_refused(spec):
    settings = validated(
        spec,
        **{
            "sdk.batch.size": "100",
            "sdk.batch.delay": "1s",
            "sdk.rate.perSecond": "0",
            "sdk.rate.burst": "3",
        },
    )
    assert settings.sdk_batch_size == 100
    problems = refused(spec, **{"sdk.rate.perSecond": "10"})
    assert "cannot pace" in problems["sdk.rate.perSecond"]


def test_refusal_names_the_file_line_and_setting():
    text = textwrap.dedent("""\
        version: "2.2"
        pipelines:
          - id: p
            connectors:
              - id: gen
                type: source
                plugin: builtin:generator
                settings:
                  sdk.batch.size: "10"
                  sdk.rate.perSecond: "100"
              - id: out
                type: destination
                plugin: builtin:log
        """)
    with pytest.raises(ConfigError) as caught:
        load_pipeline_text(text, "p.yaml", {})
    (issue,) = caught.value.issues
    assert issue.field_path == "pipelines[0].connectors[0].settings.sdk.rate.perSecond"
    assert issue.line == 10
    assert "not supported on a source" in issue.message
