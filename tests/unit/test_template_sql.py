"""Which Go templates become Spark SQL, and what SQL: only where Go cannot fail and prints the same."""

from __future__ import annotations

import pytest
import sqlglot

from airflow_conduit.config.template_sql import condition_sql, text_sql
from airflow_conduit.gotemplate import Template

TABLE = "coalesce(metadata['table'], '')"


@pytest.mark.parametrize(
    ("source", "sql"),
    [
        ('{{ eq .Metadata.table "orders" }}', f"({TABLE} = 'orders')"),
        ('{{ eq .Metadata.table "a" "b" }}', f"({TABLE} = 'a' OR {TABLE} = 'b')"),
        ('{{ ne .Metadata.table "orders" }}', f"({TABLE} <> 'orders')"),
        ('{{ lt .Metadata.table "m" }}', f"({TABLE} < 'm')"),
        (
            '{{ eq (index .Metadata "opencdc.collection") "users" }}',
            "(coalesce(metadata['opencdc.collection'], '') = 'users')",
        ),
        ('{{ .Metadata.table | hasPrefix "ord" }}', f"startswith({TABLE}, 'ord')"),
        ('{{ contains "rd" .Metadata.table }}', f"contains({TABLE}, 'rd')"),
        (
            '{{ and (eq .Metadata.table "a") (not (eq .Metadata.kind "b")) }}',
            f"(({TABLE} = 'a') AND (NOT (coalesce(metadata['kind'], '') = 'b')))",
        ),
        ("{{ not .Metadata.table }}", f"({TABLE} = '')"),
        ("{{ true }}", "TRUE"),
    ],
)
def test_conditions_that_become_spark_sql(source: str, sql: str) -> None:
    translated = condition_sql(Template.parse(source))
    assert translated == sql
    assert sqlglot.parse_one(translated, read="spark") is not None


@pytest.mark.parametrize(
    "source",
    [
        '{{ eq .Payload.After.name "x" }}',  # Go fails on a number compared with a string
        '{{ eq .Operation "create" }}',  # an int to Go: always an error
        "{{ .Metadata.table }}",  # a string: Go's ParseBool decides
        "true",  # text, not an action
        ' {{ eq .Metadata.a "b" }}',  # " true" is not a bool to ParseBool
        '{{ eq (upper .Metadata.a) "B" }}',  # Go's and Spark's upper case differ on some letters
        '{{ and (eq .Metadata.a "b") .Metadata.c }}',  # and of a string returns the string
        '{{ $x := .Metadata.a }}{{ eq $x "b" }}',
    ],
)
def test_templates_that_stay_in_python(source: str) -> None:
    assert condition_sql(Template.parse(source)) is None


def test_text_templates() -> None:
    assert text_sql(Template.parse("plain")) == "'plain'"
    assert text_sql(Template.parse("")) == "''"
    assert text_sql(Template.parse("id-{{ .Metadata.table }}!")) == f"concat('id-', {TABLE}, '!')"
    assert text_sql(Template.parse("{{ .Payload.After.name }}")) is None


def test_json_of_data_fields_becomes_spark_sql() -> None:
    after = (
        "CASE WHEN after IS NOT NULL THEN conduit_go_json(after, true) "
        "WHEN after_raw IS NOT NULL THEN concat('\"', base64(after_raw), '\"') ELSE 'null' END"
    )
    assert text_sql(Template.parse("{{ toJson .Payload.After }}")) == after
    assert text_sql(Template.parse("{{ .Payload.After | toJson }}\n")) == f"concat({after}, '\n')"
    raw = text_sql(Template.parse("{{ toRawJson .Key }}"))
    assert raw is not None and "conduit_go_json(key, false)" in raw
    both = text_sql(Template.parse("{{ toJson .Payload.Before }},{{ toJson .Payload.After }}"))
    assert both is not None and "conduit_go_json(before, true)" in both
    assert sqlglot.parse_one(both, read="spark") is not None
    for python_only in (
        "{{ .Payload.After }}",  # Go prints a map as map[k:v]
        "{{ not .Payload.After }}",
        '{{ eq .Payload.After "x" }}',
        "{{ toJson .Payload }}",
        "{{ toJson . }}",
        "{{ toPrettyJson .Payload.After }}",
        "{{ toJson .Payload.After.name }}",
    ):
        assert text_sql(Template.parse(python_only)) is None, python_only


def test_missing_key_error_keeps_metadata_fields_in_python() -> None:
    """A destination's template runs with ``missingkey=error``: ``.Metadata.x`` fails for a missing
    key (the record is written as opencdc/json then), ``index .Metadata "x"`` does not."""
    assert text_sql(Template.parse("{{ .Metadata.table }}"), missing_key_error=True) is None
    assert text_sql(Template.parse("{{ toJson .Key }}{{ .Metadata.a }}"), missing_key_error=True) is None
    indexed = text_sql(Template.parse('{{ index .Metadata "table" }}'), missing_key_error=True)
    assert indexed == TABLE
    assert text_sql(Template.parse("{{ .Metadata.table }}")) == TABLE
