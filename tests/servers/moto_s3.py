"""A throwaway S3 server for the tests, chaos runs and benchmarks: moto in server mode on 127.0.0.1.

The server runs in this process (``ThreadedMotoServer``), so its buckets live in this process's memory:
stopping it (an outage) and starting it again on the same port keeps every bucket and object, which is
what a test of "server down, then back, nothing lost" needs. Engines run by the tests (in process, or
``airflow-conduit`` subprocesses) reach it over HTTP like any S3 endpoint.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

ACCESS_KEY = "AKIATESTCONDUIT0001"
SECRET_KEY = "moto-Secret-Key-never-logged-42"  # noqa: S105 - a throwaway test server
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MotoS3:
    """One moto server; :meth:`stop` and :meth:`start` simulate an outage (the data survives)."""

    port: int = field(default_factory=_free_port)
    _server: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"moto did not listen on 127.0.0.1:{self.port}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def bucket(self, versioned: bool = False) -> str:
        """A new, empty bucket with a unique name (the server's state is shared by the session)."""
        name = f"b-{uuid.uuid4().hex[:12]}"
        s3 = self.client()
        s3.create_bucket(Bucket=name)
        if versioned:
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name

    def settings(self, bucket: str, **extra: str) -> str:
        """The connector settings for ``bucket`` on this server, as YAML lines (10 spaces deep)."""
        values = {
            "aws.accessKeyId": ACCESS_KEY,
            "aws.secretAccessKey": SECRET_KEY,
            "aws.region": REGION,
            "aws.bucket": bucket,
            "aws.endpoint": self.url,
            "aws.pathStyle": "true",
            **extra,
        }
        return "".join(f'          {key}: "{value}"\n' for key, value in values.items())

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def body(self, bucket: str, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=bucket, Key=key)["Body"].read())


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """moto's S3 on a free loopback port, started once per session, stopped after."""
    server = MotoS3()
    server.start()
    yield server
    server.stop()
