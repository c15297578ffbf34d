"""Conduit field references and their translation to Spark SQL (pure Python; no Spark here)."""

from __future__ import annotations

import pytest

from airflow_conduit.config.fieldref import (
    FieldRef,
    condition_to_sql,
    parse_field_list,
    parse_field_ref,
    parse_rename_mapping,
    ref_to_sql,
    variant_path,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (".Position", FieldRef("position")),
        (".Operation", FieldRef("operation")),
        (".Metadata", FieldRef("metadata")),
        (".Metadata.k", FieldRef("metadata", ("k",))),
        ('.Metadata["opencdc.collection"]', FieldRef("metadata", ("opencdc.collection",))),
        (".Metadata['single']", FieldRef("metadata", ("single",))),
        (".Key", FieldRef("key")),
        (".Key.a.b", FieldRef("key", ("a", "b"))),
        (".Payload.After", FieldRef("after")),
        (".Payload.After.a.b", FieldRef("after", ("a", "b"))),
        ('.Payload.Before["a b"].c', FieldRef("before", ("a b", "c"))),
        ('.Payload.After["say \\"hi\\""]', FieldRef("after", ('say "hi"',))),
        ("  .Key.id  ", FieldRef("key", ("id",))),
    ],
)
def test_parse_every_form(text: str, expected: FieldRef) -> None:
    assert parse_field_ref(text) == expected


def test_str_round_trips() -> None:
    for text in ['.Metadata["a.b"]', ".Payload.After.x", '.Key["a b"].c', ".Position", ".Payload.Before"]:
        assert str(parse_field_ref(text)) == text


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty field reference"),
        ("Payload.After", "starts with '.'"),
        (".Payload", "must be followed by .Before or .After"),
        (".Payload.Middle", "must be followed by .Before or .After"),
        (".payload.after", "did you mean .Payload?"),
        (".Foo", "unknown field '.Foo'"),
        (".Metadata.a.b", '.Metadata["a.b"]'),
        (".Position.x", ".Position has no fields"),
        (".Operation.x", ".Operation has no fields"),
        (".Payload.After.", "expected a field name"),
        ('.Metadata["open', "unterminated string"),
        ('.Key["a"', "expected ']'"),
        (".Key.a b", "unexpected ' b'"),
        ('.Key["a\'b\\"c"]', "both ' and"),
    ],
)
def test_parse_errors(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_field_ref(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("text", "sql"),
    [
        (".Position", "CAST(position AS STRING)"),
        (".Operation", "operation"),
        (".Metadata", "to_json(metadata)"),
        (".Metadata.k", "metadata['k']"),
        ('.Metadata["it\'s"]', "metadata['it\\'s']"),
        ('.Metadata["back\\\\slash"]', "metadata['back\\\\slash']"),
        (".Key", "COALESCE(conduit_variant_json(key), CAST(key_raw AS STRING))"),
        (".Payload.Before", "COALESCE(conduit_variant_json(before), CAST(before_raw AS STRING))"),
        (".Payload.After.a.b", "try_variant_get(after, '$.a.b', 'string')"),
        ('.Payload.After["a b"]', "try_variant_get(after, '$[\\'a b\\']', 'string')"),
        ('.Key["it\'s"]', "try_variant_get(key, '$[\"it\\'s\"]', 'string')"),
        ('.Key["d.e"]', "try_variant_get(key, '$[\\'d.e\\']', 'string')"),
    ],
)
def test_ref_to_sql(text: str, sql: str) -> None:
    assert ref_to_sql(parse_field_ref(text)) == sql


def test_variant_path_quotes() -> None:
    assert variant_path(("a", "b_1")) == "$.a.b_1"
    assert variant_path(("x y",)) == "$['x y']"
    assert variant_path(("it's",)) == '$["it\'s"]'
    assert variant_path(('x"y',)) == "$['x\"y']"


def test_condition_translation() -> None:
    condition = ".Payload.After.kind = 'refund' AND .Metadata[\"opencdc.collection\"] = 'orders'"
    assert condition_to_sql(condition) == (
        "try_variant_get(after, '$.kind', 'string') = 'refund' AND metadata['opencdc.collection'] = 'orders'"
    )


def test_condition_leaves_strings_identifiers_and_numbers_alone() -> None:
    condition = "'.Payload.After.x' = `.Key` AND t.Key = 1.5 AND \".Operation\" = 'it''s .Key'"
    assert condition_to_sql(condition) == condition


def test_condition_numeric_cast() -> None:
    assert condition_to_sql("CAST(.Payload.After.amount AS DOUBLE) > 100") == (
        "CAST(try_variant_get(after, '$.amount', 'string') AS DOUBLE) > 100"
    )


def test_condition_other_forms() -> None:
    assert condition_to_sql(".Operation IN ('create', 'update')") == "operation IN ('create', 'update')"
    assert (
        condition_to_sql("(.Key IS NULL)")
        == "(COALESCE(conduit_variant_json(key), CAST(key_raw AS STRING)) IS NULL)"
    )
    assert condition_to_sql("NOT .Metadata.x LIKE 'a%'") == "NOT metadata['x'] LIKE 'a%'"


@pytest.mark.parametrize(
    ("condition", "fragment"),
    [
        (".Payload.After.x = = 1", "not a valid Spark SQL expression"),
        ("a AND AND b", "not a valid Spark SQL expression"),
        ("a = 'open", "unterminated"),
        ('{{ eq .Metadata.foo "bar" }}', "not Go templates"),
        (".payload.after.x = 1", "case-sensitive"),
        (".Payload.x = 1", "must be followed by .Before or .After"),
        ("a = 1; b = 2", "single Spark SQL expression"),
        ("SELECT 1", "not a statement"),
        ("   ", "empty condition"),
    ],
)
def test_condition_errors(condition: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        condition_to_sql(condition)
    assert fragment in str(caught.value)


def test_field_list_and_rename_mapping() -> None:
    assert parse_field_list('.Metadata["a,b"], .Payload.After.x') == (
        FieldRef("metadata", ("a,b",)),
        FieldRef("after", ("x",)),
    )
    assert parse_rename_mapping('.Metadata["a:b"]:c, .Payload.After.x:y') == (
        (FieldRef("metadata", ("a:b",)), "c"),
        (FieldRef("after", ("x",)), "y"),
    )
    for bad in (".Payload.After.x", ".Payload.After:y", ".Operation:x", ".Key.a:b.c"):
        with pytest.raises(ValueError):
            parse_rename_mapping(bad)
