"""The test_decoding parser: the lines below are as PostgreSQL 15 wrote them (see the module docstring)."""

from __future__ import annotations

import json

import pytest

from airflow_conduit.engine.connectors.postgres.decoding import (
    Begin,
    Change,
    Column,
    Commit,
    Other,
    ParseError,
    columns_json,
    int_to_lsn,
    lsn_to_int,
    parse_row,
    unquote_identifier,
)


def values(columns: tuple[Column, ...] | None) -> dict:
    assert columns is not None
    return json.loads(columns_json(columns))


def test_begin_and_commit_carry_the_xid() -> None:
    assert parse_row("BEGIN 730") == Begin(730)
    assert parse_row("COMMIT 730") == Commit(730)
    assert parse_row("COMMIT 731 (at 2026-01-01 00:00:00+00)") == Commit(731)
    assert parse_row("BEGIN") == Begin(None)


def test_insert_converts_values_by_type() -> None:
    change = parse_row(
        "table public.x: INSERT: id[integer]:2 v[text]:'b''q' j[jsonb]:'{\"a\": [1, 2]}' "
        "n[numeric]:1.5 b[boolean]:true f[double precision]:1e+30 big[bigint]:-9007199254740993 "
        "t[timestamp without time zone]:'2026-01-01 00:00:00' arr[integer[]]:'{1,2}' off[boolean]:false"
    )
    assert isinstance(change, Change)
    assert (change.table, change.action, change.old) == ("public.x", "INSERT", None)
    assert values(change.new) == {
        "id": 2,
        "v": "b'q",
        "j": {"a": [1, 2]},
        "n": 1.5,
        "b": True,
        "f": 1e30,
        "big": -9007199254740993,
        "t": "2026-01-01 00:00:00",
        "arr": "{1,2}",
        "off": False,
    }


def test_numbers_keep_their_digits_in_json() -> None:
    change = parse_row("table public.x: INSERT: n[numeric]:12345678901234567890.123456789")
    assert isinstance(change, Change) and change.new
    assert columns_json(change.new) == '{"n":12345678901234567890.123456789}'


def test_numerics_spark_would_round_become_text() -> None:
    """Spark keeps a JSON number of up to 38 digits, 38 of them after the point, as a decimal."""
    digits38, digits39 = "1" + "2" * 37, "1" + "2" * 38
    fraction38 = "0." + "0" * 37 + "1"
    row = (
        f"table public.x: INSERT: a[numeric]:{digits38} b[numeric]:{digits39} c[numeric]:-{digits38[:20]}."
        f"{digits38[20:]} d[numeric]:{fraction38} e[numeric]:{fraction38}5 f[bigint]:-9223372036854775808"
    )
    change = parse_row(row)
    assert isinstance(change, Change) and change.new
    assert columns_json(change.new) == (
        f'{{"a":{digits38},"b":"{digits39}","c":-{digits38[:20]}.{digits38[20:]},'
        f'"d":{fraction38},"e":"{fraction38}5","f":-9223372036854775808}}'
    )


def test_nan_and_infinity_become_text() -> None:
    change = parse_row(
        "table public.x: INSERT: n[numeric]:NaN f[double precision]:-Infinity r[real]:Infinity"
    )
    assert values(change.new) == {"n": "NaN", "f": "-Infinity", "r": "Infinity"}  # type: ignore[union-attr]


def test_nulls_spaces_newlines_and_quotes_in_values() -> None:
    change = parse_row(
        "table public.x: INSERT: id[integer]:1 a[text]:null b[text]:'two words' "
        "c[text]:'new\nline' d[text]:'''' e[text]:'it''s a ''quote'' : x[int]:3' f[text]:''"
    )
    assert values(change.new) == {  # type: ignore[union-attr]
        "id": 1,
        "a": None,
        "b": "two words",
        "c": "new\nline",
        "d": "'",
        "e": "it's a 'quote' : x[int]:3",
        "f": "",
    }


def test_quoted_identifiers() -> None:
    change = parse_row(
        'table "My Schema"."Odd: Table": INSERT: "Odd Col"[character varying]:\'v\' '
        '"say ""hi"""[text]:\'h\' plain[integer]:1'
    )
    assert isinstance(change, Change)
    assert change.table == '"My Schema"."Odd: Table"'
    assert values(change.new) == {"Odd Col": "v", 'say "hi"': "h", "plain": 1}
    assert unquote_identifier('"say ""hi"""') == 'say "hi"'
    assert unquote_identifier("plain") == "plain"


def test_update_without_and_with_old_key() -> None:
    plain = parse_row("table public.x: UPDATE: id[integer]:1 v[text]:'c'")
    assert isinstance(plain, Change)
    assert plain.old is None and values(plain.new) == {"id": 1, "v": "c"}

    full = parse_row(
        "table public.x: UPDATE: old-key: id[integer]:2 v[text]:'old value' n[numeric]:NaN "
        "new-tuple: id[integer]:3 v[text]:'new-tuple: not a marker' n[numeric]:null"
    )
    assert isinstance(full, Change)
    assert values(full.old) == {"id": 2, "v": "old value", "n": "NaN"}
    assert values(full.new) == {"id": 3, "v": "new-tuple: not a marker", "n": None}


def test_unchanged_toast_datum_is_unknown_not_null() -> None:
    change = parse_row(
        "table public.tt: UPDATE: id[integer]:1 big[text]:unchanged-toast-datum small[text]:'y'"
    )
    assert isinstance(change, Change) and change.new
    big = change.new[1]
    assert big.toasted and big.text is None
    assert values(change.new) == {"id": 1, "small": "y"}  # left out, not null


def test_delete_and_no_tuple_data() -> None:
    delete = parse_row("table public.x: DELETE: id[integer]:3 b[boolean]:false")
    assert isinstance(delete, Change)
    assert delete.new is None and values(delete.old) == {"id": 3, "b": False}
    bare = parse_row("table public.x: DELETE: (no-tuple-data)")
    assert isinstance(bare, Change) and bare.old is None and bare.new is None


def test_truncate_and_other_rows_carry_no_columns() -> None:
    truncate = parse_row("table public.y: TRUNCATE: (no-flags)")
    assert isinstance(truncate, Change) and truncate.action == "TRUNCATE"
    assert truncate.new is None and truncate.old is None
    assert isinstance(parse_row("message: transactional: 1 prefix: p, sz: 1 content:x"), Other)


def test_bit_strings_and_arrays_with_brackets_in_the_type() -> None:
    change = parse_row("table public.x: INSERT: bits[bit varying]:B'0101' m[text[]]:'{\"a b\",c}'")
    assert values(change.new) == {"bits": "0101", "m": '{"a b",c}'}  # type: ignore[union-attr]


def test_malformed_lines_raise() -> None:
    with pytest.raises(ParseError):
        parse_row("table public.x: INSERT: id[integer]:1 v[text]:'unterminated")
    with pytest.raises(ParseError):
        parse_row("table public.x: INSERT: id:1")


def test_lsn_round_trip_and_order() -> None:
    assert lsn_to_int("0/19286D8") < lsn_to_int("0/1928798") < lsn_to_int("1/0")
    assert int_to_lsn(lsn_to_int("16/B374D848")) == "16/B374D848"
    assert lsn_to_int("0/0") == 0
