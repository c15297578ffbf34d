"""What the Postgres source and destination share: connecting, hiding the password, and sorting
PostgreSQL's errors into transient (a restart may help) and fatal (a person has to fix something)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow_conduit.engine.connectors._secrets import redact, safe_url
from airflow_conduit.errors import Code, ConduitError, FatalError, TransientError

# SQLSTATE classes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
DATA_ERROR_CLASSES = ("22", "23")
"""Data exception, integrity constraint violation: the record is at fault, not the pipeline."""
_TRANSIENT_CLASSES = ("08", "40", "53", "57", "58")
"""Connection exception, transaction rollback, insufficient resources, operator intervention, system."""
_FATAL_HINTS = {
    "28P01": "authentication failed: check the user and password in the url",
    "28000": "the server refused this user: check the user in the url and pg_hba.conf",
    "3D000": "the database does not exist: check the database name in the url",
    "42P01": "a table does not exist: create it, or check `table`/`tables` in the settings",
    "42703": "a column does not exist: check the column names against the table",
    "42501": "missing privileges: grant the user the rights it needs on the table",
}
_OBJECT_IN_USE = "55006"
"""Object in use: for these connectors, a replication slot active in another session (transient)."""


def connect(url: str, code: str = Code.DESTINATION_FAILED, **kwargs: Any) -> Any:
    """A psycopg connection; connection failures come out classified (see :func:`classify`)."""
    import psycopg

    try:
        return psycopg.connect(url, connect_timeout=10, **kwargs)
    except psycopg.Error as error:
        raise classify(error, url, f"cannot connect to {safe_url(url)}", code) from None


def sqlstate(error: BaseException) -> str:
    return str(getattr(error, "sqlstate", None) or "")


def is_data_error(error: BaseException) -> bool:
    return sqlstate(error)[:2] in DATA_ERROR_CLASSES


@contextmanager
def classified(url: str | None, context: str, code: str = Code.DESTINATION_FAILED) -> Iterator[None]:
    """psycopg errors raised in the block come out through :func:`classify`; ours pass through."""
    import psycopg

    try:
        yield
    except psycopg.Error as error:
        raise classify(error, url, context, code) from None


def classify(
    error: BaseException, url: str | None, context: str, code: str = Code.DESTINATION_FAILED
) -> ConduitError:
    """A psycopg error as a :class:`TransientError` or :class:`FatalError` whose message names what to
    fix; never carries the password."""
    state = sqlstate(error)
    detail = redact(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__, url)
    if state == _OBJECT_IN_USE:
        return TransientError(
            f"{context}: the replication slot is in use by another session ({detail})", code=code
        )
    if state in _FATAL_HINTS:
        return FatalError(f"{context}: {_FATAL_HINTS[state]} ({detail})", code=code)
    if not state and "password authentication failed" in str(error):
        # Connection-time errors may come without a SQLSTATE.
        return FatalError(f"{context}: {_FATAL_HINTS['28P01']} ({detail})", code=code)
    if not state or state[:2] in _TRANSIENT_CLASSES:
        return TransientError(f"{context}: PostgreSQL unreachable or unavailable ({detail})", code=code)
    return FatalError(f"{context}: {detail}", code=code)
