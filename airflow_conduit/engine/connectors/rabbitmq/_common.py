"""What the RabbitMQ source and destination share: connecting, hiding the password, and sorting pika's
errors into transient (a restart may help) and fatal (a person has to fix something)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_conduit.engine.connectors._secrets import redact, safe_url
from airflow_conduit.errors import ConduitError, FatalError, TransientError

if TYPE_CHECKING:  # executors import this module: no pydantic there
    from airflow_conduit.config.settings.rabbitmq import _Connection

# AMQP reply codes (the AMQP 0-9-1 spec's constants) that a person must act on.
_FATAL_REPLIES = {
    403: "access refused: give the user permissions on the vhost, queue and exchange",
    404: "not found: create the queue or exchange, or let the connector declare it (skipDeclare: false)",
    405: "resource locked: another connection holds the queue exclusively",
    406: "precondition failed: the queue or exchange exists with other settings (durable, autoDelete, "
    "exclusive, type); make the settings match it",
    530: "not allowed: check the vhost in the url and the user's access to it",
}


@dataclass(frozen=True)
class Server:
    """How to reach the server (plain values: it travels to executors)."""

    url: str
    tls_enabled: bool = False
    tls_ca_cert: str = ""
    tls_client_cert: str = ""
    tls_client_key: str = ""

    @classmethod
    def of(cls, settings: _Connection) -> Server:
        return cls(
            settings.url,
            settings.tls_enabled,
            settings.tls_ca_cert,
            settings.tls_client_cert,
            settings.tls_client_key,
        )


def connect(server: Server, code: str, *, heartbeat: int | None = None) -> Any:
    """A pika ``BlockingConnection``; failures come out classified (:func:`classify`)."""
    import pika

    with classified(server.url, f"cannot connect to {safe_url(server.url)}", code):
        params = pika.URLParameters(server.url)
        if server.tls_enabled:
            context = ssl.create_default_context(cafile=server.tls_ca_cert)
            context.load_cert_chain(server.tls_client_cert, server.tls_client_key)
            params.ssl_options = pika.SSLOptions(context, params.host)
        if heartbeat is not None:
            params.heartbeat = heartbeat
        params.connection_attempts = 1
        params.socket_timeout = 10
        params.blocked_connection_timeout = 60
        return pika.BlockingConnection(params)


@contextmanager
def classified(url: str | None, context: str, code: str) -> Iterator[None]:
    """pika (and socket) errors raised in the block come out through :func:`classify`; ours pass."""
    try:
        yield
    except ConduitError:
        raise
    except Exception as error:
        raise classify(error, url, context, code) from None


def classify(error: BaseException, url: str | None, context: str, code: str) -> ConduitError:
    """An error as a :class:`TransientError` or :class:`FatalError` that names what to fix; never
    with the password."""
    import pika.exceptions as amqp

    detail = redact(f"{type(error).__name__}: {error}".strip(), url)
    if isinstance(error, amqp.ProbableAuthenticationError | amqp.AuthenticationError):
        return FatalError(
            f"{context}: authentication failed: check the user and password in the url", code=code
        )
    if isinstance(error, amqp.ProbableAccessDeniedError):
        return FatalError(
            f"{context}: access denied: check the vhost in the url and the user's access", code=code
        )
    reply_code = getattr(error, "reply_code", None)
    if isinstance(error, amqp.ConnectionClosedByBroker) and reply_code == 403:
        return FatalError(
            f"{context}: authentication failed: check the user and password in the url", code=code
        )
    if isinstance(reply_code, int) and reply_code in _FATAL_REPLIES:
        return FatalError(f"{context}: {_FATAL_REPLIES[reply_code]} ({detail})", code=code)
    if isinstance(error, ssl.SSLError | FileNotFoundError | PermissionError | ValueError):
        return FatalError(f"{context}: bad TLS files or url ({detail})", code=code)
    return TransientError(f"{context}: RabbitMQ unreachable or unavailable ({detail})", code=code)
