"""Publisher confirms with many messages in flight, on a pika ``BlockingConnection``.

pika's ``BlockingChannel.basic_publish`` in confirm mode waits for each message's confirm before it
sends the next: one round trip (and, for a persistent message, one disk sync of the server's) per
message, about 100 messages/s here. RabbitMQ confirms asynchronously, by delivery tag, so this sends up to
``window`` messages before it waits, and waits for all of them before it returns. It uses the channel
under the blocking adapter (``BlockingChannel._impl``, pika's asynchronous ``Channel``), whose
``confirm_delivery`` takes the ack/nack callback: the blocking adapter offers no way to publish without
waiting in confirm mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

DEFAULT_WINDOW = 2_000
CONFIRM_TIMEOUT = 120.0


class Unconfirmed(Exception):
    """The server nacked a message, returned an unroutable one, or did not confirm in time."""


@dataclass
class ConfirmingChannel:
    """A channel in confirm mode that tracks its unconfirmed delivery tags."""

    connection: Any
    channel: Any
    window: int = DEFAULT_WINDOW
    _next_tag: int = 0
    _pending: set[int] = field(default_factory=set)
    _failures: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, connection: Any, channel: Any, window: int = DEFAULT_WINDOW) -> ConfirmingChannel:
        confirming = cls(connection, channel, window)
        selected: list[bool] = []
        channel._impl.confirm_delivery(
            ack_nack_callback=confirming._on_confirm, callback=lambda _frame: selected.append(True)
        )
        channel._impl.add_on_return_callback(confirming._on_return)
        while not selected:
            connection.process_data_events(time_limit=1)
        return confirming

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag = int(method.delivery_tag)
        done = {t for t in self._pending if t <= tag} if method.multiple else {tag}
        self._pending -= done
        if method.NAME == "Basic.Nack":
            self._failures.append(f"the server refused {len(done)} message(s) (basic.nack)")

    def _on_return(self, _channel: Any, method: Any, _properties: Any, _body: bytes) -> None:
        self._failures.append(
            f"a message with routing key {method.routing_key!r} reached no queue ({method.reply_text})"
        )

    def publish(self, exchange: str, routing_key: str, body: bytes, properties: Any, mandatory: bool) -> None:
        """Send one message; waits only while ``window`` messages are unconfirmed."""
        self.channel._impl.basic_publish(exchange, routing_key, body, properties, mandatory)
        self._next_tag += 1
        self._pending.add(self._next_tag)
        if len(self._pending) >= self.window:
            self._wait_below(self.window // 2)

    def wait_all(self) -> None:
        """Return once the server confirmed every message sent; raise :class:`Unconfirmed` if it
        refused or returned one."""
        self._wait_below(1)

    def _wait_below(self, limit: int) -> None:
        deadline = time.monotonic() + CONFIRM_TIMEOUT
        self.connection.process_data_events(time_limit=0)
        while len(self._pending) >= limit and not self._failures:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self._pending)} message(s) not confirmed in {CONFIRM_TIMEOUT:.0f}s")
            self.connection.process_data_events(time_limit=0.5)
        if self._failures:
            failures, self._failures = self._failures, []
            raise Unconfirmed("; ".join(failures))
