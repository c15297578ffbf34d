"""The boto3 client both S3 connectors use, and botocore's errors sorted into transient and fatal.

Transient (a restart may succeed): the endpoint unreachable, a connection cut or timed out, a 5xx or a
throttling answer. Fatal (a person has to fix something): a missing bucket, refused credentials or
access, any other 4xx. Messages name the setting to fix and never carry the secret key (nor the
access key id: it is an identifier, but it is half of the credentials).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_conduit.errors import Code, ConduitError, FatalError, TransientError

logger = logging.getLogger("airflow_conduit.engine")

# A dead endpoint must fail a run in seconds, not after botocore's default minute of retries.
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 60
MAX_ATTEMPTS = 3

_MISSING_BUCKET = ("NoSuchBucket",)
_REFUSED = (
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidClientTokenId",
    "ExpiredToken",
    "InvalidToken",
    "AllAccessDisabled",
    "AuthorizationHeaderMalformed",
)
_RETRYABLE = ("SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError")
MISSING_OBJECT = ("NoSuchKey", "NoSuchVersion", "404")


@dataclass(frozen=True)
class S3Access:
    """How to reach the bucket, as plain values (it travels to Spark's Python workers)."""

    access_key_id: str
    secret_access_key: str
    region: str
    bucket: str
    endpoint: str = ""
    path_style: bool = False

    def __repr__(self) -> str:  # never print the credentials by accident
        return f"S3Access(bucket={self.bucket!r}, region={self.region!r}, endpoint={self.endpoint!r})"

    @classmethod
    def from_settings(cls, settings: Any) -> S3Access:
        return cls(
            access_key_id=settings.access_key_id,
            secret_access_key=settings.secret_access_key.get_secret_value(),
            region=settings.region,
            bucket=settings.bucket,
            endpoint=settings.endpoint,
            path_style=settings.path_style,
        )

    @property
    def where(self) -> str:
        """The bucket as messages name it."""
        return f"s3://{self.bucket}" + (f" at {self.endpoint}" if self.endpoint else "")

    def redact(self, text: str) -> str:
        for secret in (self.secret_access_key, self.access_key_id):
            if secret:
                text = text.replace(secret, "***")
        return text

    def client(self) -> Any:
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]

        config = Config(
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            s3={"addressing_style": "path" if self.path_style else "auto"},
        )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint or None,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name=self.region,
            config=config,
        )


def error_code(error: BaseException) -> str:
    """A ``ClientError``'s S3 error code (``NoSuchBucket``), else ``""``."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "")
    return ""


def _status(error: BaseException) -> int:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return 0


def classify(error: BaseException, access: S3Access, context: str, code: str) -> ConduitError:
    """``error`` as a :class:`TransientError` or a :class:`FatalError` that says what to fix."""
    from botocore.exceptions import (  # type: ignore[import-untyped]
        BotoCoreError,
        ClientError,
        ConnectionError,
        HTTPClientError,
        NoCredentialsError,
        ParamValidationError,
    )

    detail = access.redact(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
    if isinstance(error, ClientError):
        s3_code, status = error_code(error), _status(error)
        if s3_code in _MISSING_BUCKET:
            return FatalError(
                f"{context}: bucket {access.bucket!r} does not exist: create it, or check aws.bucket "
                f"(and aws.endpoint, aws.region) ({detail})",
                code=code,
            )
        if s3_code in _REFUSED or status in (401, 403):
            return FatalError(
                f"{context}: access refused: check aws.accessKeyId and aws.secretAccessKey, and that "
                f"they may read and write {access.where} ({detail})",
                code=code,
            )
        if s3_code in _RETRYABLE or status >= 500 or status == 429:
            return TransientError(f"{context}: S3 unavailable ({detail})", code=code)
        return FatalError(f"{context}: {detail}", code=code)
    if isinstance(error, NoCredentialsError | ParamValidationError):
        return FatalError(f"{context}: {detail}: check the aws.* settings", code=code)
    if isinstance(error, ConnectionError | HTTPClientError | BotoCoreError):
        return TransientError(
            f"{context}: S3 unreachable at {access.endpoint or 'AWS'} ({detail})", code=code
        )
    return TransientError(f"{context}: {detail}", code=code)


@contextmanager
def classified(access: S3Access, context: str, code: str = Code.DESTINATION_FAILED) -> Iterator[None]:
    """botocore's errors raised in the block come out through :func:`classify`; ours pass through."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise classify(error, access, context, code) from None


def check_bucket(access: S3Access, context: str, code: str) -> None:
    """Fail fast (and classified) when the bucket cannot be reached or does not exist."""
    from botocore.exceptions import ClientError

    with classified(access, context, code):
        try:
            access.client().head_bucket(Bucket=access.bucket)
        except ClientError as error:
            if _status(error) == 404:  # HEAD has no body, so no NoSuchBucket code: say it
                error.response.setdefault("Error", {})["Code"] = "NoSuchBucket"
            raise
