"""The ``builtin:postgres`` source's settings and the tables it reads, resolved against the database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_conduit.engine.connectors.postgres import _common
from airflow_conduit.errors import Code, FatalError

if TYPE_CHECKING:  # the source module stays light on Spark's Python workers (no pydantic)
    from airflow_conduit.config.settings import PostgresSourceSettings


@dataclass(frozen=True)
class Table:
    """A configured table, resolved against the database once."""

    name: str
    """As configured: the records' ``opencdc.collection``."""
    qualified: str
    """``schema.table``, quoted where needed: how SQL, publications and ``test_decoding`` name it."""
    columns: tuple[tuple[str, str], ...]
    """``(name, type)`` in table order; types as ``format_type`` prints them."""
    key: tuple[str, ...]
    """The record key's columns: the ``key`` setting, else the primary key."""
    order: str
    """The column that orders the snapshot (or ``orderingColumn`` for long polling); may be empty."""
    oid: int = 0
    """``pg_class.oid``: how ``pgoutput`` names the table."""

    def type_of(self, column: str) -> str:
        return dict(self.columns).get(column, "text")

    def select_list(self) -> str:
        # As text, by each type's output function: the same text test_decoding prints, converted alike.
        return ", ".join(f"{ident(name)}::text" for name, _ in self.columns)


@dataclass(frozen=True)
class Config:
    """What the stream reader needs of the source's settings (see ``_stream.source_options``)."""

    url: str
    tables: tuple[str, ...]
    key: str
    snapshot: bool
    mode: str
    """``logrepl`` or ``long_polling``."""
    slot: str
    ordering_column: str
    poll_interval: float
    max_records: int
    publication: str = "conduitpub"
    """``logrepl.publicationName``: what ``pgoutput`` reads."""
    plugin: str = "auto"
    """``logrepl.plugin``: ``pgoutput``, ``test_decoding``, or ``auto`` until the reader resolved it."""
    fetch_size: int = 5000
    """``snapshot.fetchSize``: rows per round trip of a snapshot page's cursor."""

    @classmethod
    def from_settings(cls, settings: PostgresSourceSettings) -> Config:
        """On the driver, from the validated settings."""
        return cls(
            url=settings.url,
            tables=tuple(t.strip() for t in settings.tables.split(",") if t.strip()),
            key=settings.key,
            snapshot=settings.snapshot_mode == "initial",
            mode="long_polling" if settings.cdc_mode == "long_polling" else "logrepl",
            slot=settings.slot_name,
            ordering_column=settings.ordering_column,
            poll_interval=settings.poll_interval,
            max_records=settings.max_records_per_batch,
            publication=settings.publication_name,
            plugin=settings.plugin,
            fetch_size=settings.snapshot_fetch_size,
        )


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def resolve_tables(conn: Any, config: Config) -> tuple[Table, ...]:
    """Each configured table's qualified name, columns and key; FatalError naming what to fix."""
    resolved = []
    names = [(name, name) for name in config.tables]  # (as named in records, as looked up)
    if config.tables == ("*",):  # as Conduit: every table of the public schema, named as it is
        names = conn.execute(
            "SELECT tablename::text, quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' "
            "ORDER BY tablename"
        ).fetchall()
    for name, lookup in names:
        row = conn.execute(
            "SELECT c.oid::int, quote_ident(n.nspname) || '.' || quote_ident(c.relname) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
            (lookup,),
        ).fetchone()
        if row is None:
            raise FatalError(
                f"postgres source: table {name!r} does not exist in {_common.safe_url(config.url)}: "
                "create it, or fix `tables` in the settings",
                code=Code.SOURCE_FAILED,
            )
        oid, qualified = row
        columns = tuple(
            conn.execute(
                "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
                "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                (oid,),
            ).fetchall()
        )
        primary = tuple(
            r[0]
            for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
                "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = %s AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
                (oid,),
            ).fetchall()
        )
        column_names = {c for c, _ in columns}
        for setting, column in (("key", config.key), ("orderingColumn", config.ordering_column)):
            if column and column not in column_names:
                raise FatalError(
                    f"postgres source: table {name!r} has no column {column!r}: fix `{setting}`",
                    code=Code.SOURCE_FAILED,
                )
        key = (config.key,) if config.key else primary
        order = config.ordering_column if config.mode == "long_polling" else (key[0] if len(key) == 1 else "")
        if config.snapshot and config.mode == "logrepl" and not order:
            what = "a composite primary key" if key else "no primary key"
            raise FatalError(
                f"postgres source: table {name!r} has {what}: set `key` to a unique column that orders "
                "the snapshot",
                code=Code.SOURCE_FAILED,
            )
        resolved.append(Table(name, qualified, columns, key, order, oid))
    return tuple(resolved)
