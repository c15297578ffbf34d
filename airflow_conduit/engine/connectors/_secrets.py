"""Passwords kept out of messages: the connectors that take a URL with credentials (PostgreSQL, RabbitMQ)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# Any ``scheme://user:password@``: the password of a URL that is not the configured one (a redirect, a
# server's own message) is cut too.
_URL_PASSWORD = re.compile(r"(?P<userinfo>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]+):[^@\s]*@")


def redact(text: str, url: str | None = None) -> str:
    """``text`` with any password removed: the one in ``url`` wherever it appears, and any URL's."""
    if url:
        password = urlsplit(url).password
        if password:
            text = text.replace(password, "***")
    return _URL_PASSWORD.sub(r"\g<userinfo>:***@", text)


def safe_url(url: str) -> str:
    """The URL as it may appear in logs: everything but the password."""
    return redact(url, url)
