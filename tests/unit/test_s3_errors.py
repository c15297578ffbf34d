"""``builtin:s3``'s error classification (botocore's own error objects, no server needed) and settings."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from airflow_conduit.config.registry import spec_of
from airflow_conduit.config.settings.s3 import S3DestinationSettings, S3SourceSettings
from airflow_conduit.config.spec import validate_settings
from airflow_conduit.engine.connectors.s3._client import S3Access, classify
from airflow_conduit.errors import FatalError, TransientError

ACCESS = S3Access("AKIAEXAMPLEID", "very-secret-key", "us-east-1", "bucket", "http://127.0.0.1:1", True)


def client_error(code: str, status: int, message: str = "no") -> ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "GetObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status", "kind", "hint"),
    [
        ("NoSuchBucket", 404, FatalError, "aws.bucket"),
        ("InvalidAccessKeyId", 403, FatalError, "aws.secretAccessKey"),
        ("SignatureDoesNotMatch", 403, FatalError, "aws.accessKeyId"),
        ("AccessDenied", 403, FatalError, "aws.accessKeyId"),
        ("SlowDown", 503, TransientError, "unavailable"),
        ("InternalError", 500, TransientError, "unavailable"),
        ("InvalidArgument", 400, FatalError, "InvalidArgument"),
    ],
)
def test_s3_answers_are_classified_with_what_to_fix(code, status, kind, hint):
    error = classify(client_error(code, status), ACCESS, "ctx", "source_failed")
    assert type(error) is kind and hint in str(error) and error.code == "source_failed"


def test_an_unreachable_endpoint_is_transient():
    error = classify(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), ACCESS, "ctx", "x")
    assert isinstance(error, TransientError) and "unreachable" in str(error)


def test_credentials_are_cut_out_of_messages():
    leaky = client_error("InvalidAccessKeyId", 403, "key AKIAEXAMPLEID with very-secret-key refused")
    message = str(classify(leaky, ACCESS, "ctx", "x"))
    assert "very-secret-key" not in message and "AKIAEXAMPLEID" not in message and "***" in message
    assert "very-secret-key" not in repr(ACCESS)


def test_settings_use_conduits_names_and_hide_the_secret():
    raw = {
        "aws.accessKeyId": "id",
        "aws.secretAccessKey": "hush-hush",
        "aws.region": "eu-west-1",
        "aws.bucket": "b",
        "pollingPeriod": "250ms",
    }
    settings, issues = validate_settings(spec_of("builtin:s3", "source"), raw)
    assert issues == [] and isinstance(settings, S3SourceSettings)
    assert settings.polling_period == 0.25 and "hush-hush" not in repr(settings)
    _, issues = validate_settings(spec_of("builtin:s3", "destination"), {**raw, "pollingPeriod": "1s"})
    keys = dict(issues)
    assert "format" in keys and "pollingPeriod" in keys  # format required; pollingPeriod is the source's
    dest = {k: v for k, v in raw.items() if k != "pollingPeriod"}
    settings, issues = validate_settings(spec_of("builtin:s3", "destination"), {**dest, "format": "json"})
    assert issues == [] and isinstance(settings, S3DestinationSettings)
    _, issues = validate_settings(spec_of("builtin:s3", "source"), {**raw, "aws.endpoint": "localhost:9000"})
    assert issues and issues[0][0] == "aws.endpoint" and "http" in issues[0][1]
