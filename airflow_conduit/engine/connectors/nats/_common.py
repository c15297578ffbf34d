"""What the NATS source and destination share: connecting (nats-py is asyncio: one event loop per user,
in a thread of its own where a connection outlives one call), hiding credentials, and sorting nats-py's
errors into transient (the server is away: a restart may help) and fatal (a person must fix something).

Kept free of Spark and pydantic: the source's executors import it for every read.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from airflow_conduit.errors import ConduitError, FatalError, TransientError

T = TypeVar("T")
_URL_USERINFO = re.compile(r"(?P<scheme>(?:nats|tls|wss?)://)[^@/\s]+@")
CONNECT_TIMEOUT = 5.0
REQUEST_TIMEOUT = 10.0
_JS_NOT_ENABLED_FOR_ACCOUNT = 10039
"""JetStream's error code (a 503, as an outage is) for an account without JetStream: not transient."""


@dataclass(frozen=True)
class Connection:
    """How to reach the servers (Conduit's ``config.Config``), as plain values for the Python workers."""

    urls: tuple[str, ...]
    name: str = ""
    nkey_path: str = ""
    credentials_file_path: str = ""
    max_reconnects: int = 5
    reconnect_wait: float = 5.0
    tls_client_cert_path: str = ""
    tls_client_private_key_path: str = ""
    tls_root_ca_cert_path: str = ""

    @classmethod
    def from_settings(cls, settings: Any, default_name: str) -> Connection:
        return cls(
            urls=tuple(settings.server_urls),
            name=settings.connection_name or default_name,
            nkey_path=settings.nkey_path,
            credentials_file_path=settings.credentials_file_path,
            max_reconnects=settings.max_reconnects,
            reconnect_wait=settings.reconnect_wait,
            tls_client_cert_path=settings.tls_client_cert_path,
            tls_client_private_key_path=settings.tls_client_private_key_path,
            tls_root_ca_cert_path=settings.tls_root_ca_cert_path,
        )

    @property
    def shown(self) -> str:
        """The servers as they may appear in a message: no user, password or token."""
        return ",".join(safe_url(url) for url in self.urls)

    def secrets(self) -> list[str]:
        found = []
        for url in self.urls:
            parts = urlsplit(url)
            found += [s for s in (parts.password, parts.username) if s]
        return found

    def _tls(self) -> ssl.SSLContext | None:
        if not (self.tls_client_cert_path or self.tls_root_ca_cert_path):
            return None
        context = ssl.create_default_context(cafile=self.tls_root_ca_cert_path or None)
        if self.tls_client_cert_path:
            context.load_cert_chain(self.tls_client_cert_path, self.tls_client_private_key_path)
        return context

    async def connect(self, reconnect: bool, code: str) -> Any:
        """A nats-py client. Connecting tries each server twice, at once (a server that is away is
        reported now, as transient). ``reconnect``: once connected, the connection may ride out a short
        outage (``maxReconnects``, ``reconnectWait``).

        nats-py applies ``max_reconnect_attempts`` to the first connect too, and tries forever when it
        is 0 or less: the first connect is bounded here, and the reconnect options are set after it."""
        from nats.aio.client import Client

        seen: list[Exception] = []

        async def quiet(error: Exception) -> None:
            """nats-py's default callback logs errors with the server URL: ours are raised, redacted.
            Kept: after the attempts nats-py says only "no servers", the servers' own errors say why."""
            seen.append(error)

        attempts, wait = 1, 0.2
        options: dict[str, Any] = {
            "servers": list(self.urls),
            "connect_timeout": CONNECT_TIMEOUT,
            "allow_reconnect": True,
            "max_reconnect_attempts": attempts,
            "reconnect_time_wait": wait,
            "error_cb": quiet,
        }
        if self.name:
            options["name"] = self.name
        if self.credentials_file_path:
            options["user_credentials"] = self.credentials_file_path
        if self.nkey_path:
            options["nkeys_seed"] = self.nkey_path
        tls = self._tls()
        if tls is not None:
            options["tls"] = tls
        client = Client()
        bound = len(self.urls) * (attempts + 1) * (CONNECT_TIMEOUT + wait) + CONNECT_TIMEOUT
        try:
            await asyncio.wait_for(client.connect(**options), bound)
        except Exception as error:  # noqa: BLE001 - sorted and re-raised
            refusals = [e for e in seen if "authorization" in str(e).lower()]
            cause = refusals[-1] if refusals else seen[-1] if seen else error
            raise classify(cause, self, f"cannot connect to NATS at {self.shown}", code) from None
        if not client._server_info.get("jetstream"):
            await self._require_jetstream(client, code)
        # Conduit's maxReconnects (negative: forever) and reconnectWait, for the rest of the connection.
        client.options["allow_reconnect"] = reconnect and self.max_reconnects != 0
        client.options["max_reconnect_attempts"] = self.max_reconnects
        client.options["reconnect_time_wait"] = self.reconnect_wait
        return client

    async def _require_jetstream(self, client: Any, code: str) -> None:
        """The server's INFO does not announce JetStream: ask whether anything on this connection serves
        it (a leaf node may reach another's). "No responders" to every JetStream request would look like
        an outage, and Airflow would restart the pipeline forever: a person must enable it."""
        import nats.js.errors as jerr

        try:
            await client.jetstream(timeout=REQUEST_TIMEOUT).account_info()
        except Exception as error:  # noqa: BLE001 - sorted and re-raised
            await client.close()
            if isinstance(error, jerr.ServiceUnavailableError) and error.err_code is None:
                raise FatalError(
                    f"JetStream is not enabled on the NATS server at {self.shown}: enable JetStream on the "
                    "server (start nats-server with -js, or add a `jetstream {}` block to its configuration)",
                    code=code,
                ) from None
            raise classify(error, self, f"cannot use JetStream on {self.shown}", code) from None


def safe_url(url: str) -> str:
    return _URL_USERINFO.sub(r"\g<scheme>***@", url)


def redact(text: str, connection: Connection) -> str:
    for secret in connection.secrets():
        text = text.replace(secret, "***")
    return _URL_USERINFO.sub(r"\g<scheme>***@", text)


def classify(error: BaseException, connection: Connection, context: str, code: str) -> ConduitError:
    """A nats-py error as a :class:`TransientError` or :class:`FatalError` naming what to fix; never
    carries credentials."""
    import nats.errors as nerr
    import nats.js.errors as jerr

    if isinstance(error, ConduitError):
        return error
    detail = redact(str(error).strip() or type(error).__name__, connection)
    lowered = detail.lower()
    if isinstance(error, (nerr.AuthorizationError, nerr.InvalidUserCredentialsError)) or (
        "authorization" in lowered or "authentication" in lowered
    ):
        return FatalError(
            f"{context}: the server refused the credentials: check the user and password in urls, "
            f"nkeyPath or credentialsFilePath ({detail})",
            code=code,
        )
    if isinstance(error, jerr.ServiceUnavailableError) and error.err_code == _JS_NOT_ENABLED_FOR_ACCOUNT:
        return FatalError(
            f"{context}: JetStream is not enabled for the account of this user: enable it for the account "
            f"(`jetstream: enabled` in the account's configuration) or connect as another user ({detail})",
            code=code,
        )
    if isinstance(error, jerr.ServiceUnavailableError):
        return TransientError(f"{context}: JetStream is unavailable ({detail})", code=code)
    if isinstance(error, jerr.APIError):
        return FatalError(f"{context}: {detail}", code=code)
    if isinstance(error, (nerr.SecureConnFailedError, nerr.SecureConnRequiredError, ssl.SSLError)):
        return FatalError(f"{context}: TLS failed: check the tls.* settings ({detail})", code=code)
    return TransientError(f"{context}: NATS server unreachable or unavailable ({detail})", code=code)


class LoopThread:
    """One asyncio event loop in a daemon thread: a connection made on it keeps answering the server's
    pings between calls from Spark (which calls the driver-side reader synchronously)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="nats-loop", daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


def nats_errors() -> tuple[type[BaseException], ...]:
    """What talking to NATS raises (sorted by :func:`classify`); anything else is a bug and propagates."""
    import nats.errors as nerr
    import nats.js.errors as jerr

    return (nerr.Error, jerr.Error, OSError, asyncio.TimeoutError, TimeoutError)
