"""How decoded changes and snapshot rows become source records (pure functions of the source module)."""

from __future__ import annotations

import json

from airflow_conduit.engine.connectors.postgres.decoding import parse_row
from airflow_conduit.engine.connectors.postgres.records import change_record, row_record
from airflow_conduit.engine.connectors.postgres.tables import Table

TABLE = Table("docs", "public.docs", (("id", "integer"), ("body", "text"), ("tag", "text")), ("id",), "id")


def fields(record: tuple) -> dict:
    position, operation, metadata, key, key_raw, before, before_raw, after, after_raw = record
    assert key_raw is None and before_raw is None and after_raw is None
    return {
        "position": position.decode(),
        "operation": operation,
        "metadata": metadata,
        "key": json.loads(key) if key else None,
        "before": json.loads(before) if before else None,
        "after": json.loads(after) if after else None,
    }


def test_unchanged_toast_value_is_taken_from_the_old_row_when_logged() -> None:
    change = parse_row(
        "table public.docs: UPDATE: old-key: id[integer]:1 body[text]:'long text' tag[text]:'a' "
        "new-tuple: id[integer]:1 body[text]:unchanged-toast-datum tag[text]:'b'"
    )
    record = fields(change_record(TABLE, change, "0/10:0"))  # type: ignore[arg-type]
    assert record["operation"] == "update"
    assert record["after"] == {"id": 1, "body": "long text", "tag": "b"}
    assert record["before"] == {"id": 1, "body": "long text", "tag": "a"}
    assert record["key"] == {"id": 1}
    assert record["metadata"] == {"opencdc.collection": "docs", "postgres.table": "docs"}


def test_unchanged_toast_value_without_old_row_is_left_out() -> None:
    change = parse_row(
        "table public.docs: UPDATE: id[integer]:1 body[text]:unchanged-toast-datum tag[text]:'b'"
    )
    record = fields(change_record(TABLE, change, "0/10:1"))  # type: ignore[arg-type]
    assert record["after"] == {"id": 1, "tag": "b"} and record["before"] is None


def test_delete_keys_by_the_old_row_and_truncate_makes_no_record() -> None:
    record = fields(change_record(TABLE, parse_row("table public.docs: DELETE: id[integer]:7"), "0/20:0"))  # type: ignore[arg-type]
    assert (record["operation"], record["key"], record["before"], record["after"]) == (
        "delete",
        {"id": 7},
        {"id": 7},
        None,
    )
    assert change_record(TABLE, parse_row("table public.docs: TRUNCATE: (no-flags)"), "0/30:0") is None  # type: ignore[arg-type]


def test_snapshot_rows_convert_like_changes() -> None:
    record = fields(row_record(TABLE, ("3", None, "x y"), "snapshot", "snapshot:docs:3"))
    assert record == {
        "position": "snapshot:docs:3",
        "operation": "snapshot",
        "metadata": {"opencdc.collection": "docs", "postgres.table": "docs"},
        "key": {"id": 3},
        "before": None,
        "after": {"id": 3, "body": None, "tag": "x y"},
    }
