"""What the Redis source and destination share: the connection settings as plain values, connecting,
and sorting Redis errors into transient (a restart may help) and fatal (a person has to fix something),
never with the password in a message."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_conduit.errors import ConduitError, FatalError, TransientError

if TYPE_CHECKING:
    import redis

    from airflow_conduit.config.settings.redis import RedisConnection

STREAM_TYPES = ("none", "stream")
"""What the key may hold: nothing yet (it is created), or a stream."""


@dataclass(frozen=True)
class Server:
    """Where the stream lives (plain values: it travels to Spark's Python workers as JSON)."""

    host: str
    port: int
    database: int
    username: str
    password: str
    key: str

    @classmethod
    def of(cls, settings: RedisConnection) -> Server:
        return cls(
            settings.host,
            settings.port,
            settings.database,
            settings.username,
            settings.password,
            settings.key,
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}/{self.database}"

    def redact(self, text: str) -> str:
        return text.replace(self.password, "***") if self.password else text


def connect(server: Server, code: str) -> redis.Redis:
    """A client on one connection (the destination's MULTI/EXEC and the source's reads need no pool),
    connected now: a refusal comes out classified (see :func:`classify`)."""
    import redis

    with classified(server, "cannot connect", code):
        return redis.Redis(
            host=server.host,
            port=server.port,
            db=server.database,
            username=server.username or None,
            password=server.password or None,
            socket_connect_timeout=10,
            socket_timeout=60,
            single_connection_client=True,
        )


_FATAL_REPLIES = {
    "WRONGPASS": "authentication failed: check redis.username and redis.password",
    "NOAUTH": "the server requires a password: set redis.password (and redis.username for an ACL user)",
    "NOPERM": "the user lacks a permission this connector needs (XADD, XREADGROUP, XACK, XGROUP, TYPE, "
    "HSET/HGET for the destination's marker): grant it in the server's ACL",
    "WRONGTYPE": "redis.key holds a value that is not a stream: name a stream (or a new key)",
    "NOGROUP": "the consumer group does not exist any more (was it destroyed?): restart the pipeline "
    "to create it again, or check consumerGroup",
}


def classify(server: Server, error: BaseException, context: str, code: str) -> ConduitError:
    """A redis-py error as :class:`TransientError` or :class:`FatalError` saying what to fix."""
    import redis.exceptions as rex

    detail = server.redact(str(error).strip() or type(error).__name__)
    reply = detail.split(" ", 1)[0]
    where = f"{context} (redis {server.address}, key {server.key!r})"
    if isinstance(error, rex.AuthenticationError) or reply in ("WRONGPASS", "NOAUTH"):
        hint = _FATAL_REPLIES["NOAUTH" if reply == "NOAUTH" else "WRONGPASS"]
        return FatalError(f"{where}: {hint} ({detail})", code=code)
    if isinstance(error, rex.BusyLoadingError):
        return TransientError(f"{where}: the server is loading its data set ({detail})", code=code)
    if isinstance(error, rex.ConnectionError | rex.TimeoutError):
        return TransientError(f"{where}: Redis unreachable ({detail})", code=code)
    if reply in _FATAL_REPLIES:
        return FatalError(f"{where}: {_FATAL_REPLIES[reply]} ({detail})", code=code)
    if "DB index is out of range" in detail:
        return FatalError(f"{where}: redis.database is beyond the server's databases ({detail})", code=code)
    if reply in ("LOADING", "TRYAGAIN", "BUSY", "MASTERDOWN", "CLUSTERDOWN"):
        return TransientError(f"{where}: the server is not ready ({detail})", code=code)
    return FatalError(f"{where}: {detail}", code=code)


@contextmanager
def classified(server: Server, context: str, code: str) -> Iterator[None]:
    """redis-py errors raised in the block come out through :func:`classify`; ours pass through."""
    import redis.exceptions as rex

    try:
        yield
    except rex.RedisError as error:
        raise classify(server, error, context, code) from None


def check_stream(client: Any, server: Server, code: str) -> None:
    """The key must be a stream or not exist yet (as the Conduit connector checks on open)."""
    kind = client.type(server.key)
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind not in STREAM_TYPES:
        raise FatalError(
            f"redis {server.address}: key {server.key!r} holds a {kind}, not a stream: name a stream "
            "(or a key that does not exist yet) in redis.key",
            code=code,
        )
