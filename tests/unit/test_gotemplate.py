"""Go text/template as Conduit evaluates it: the outputs below are what Go's text/template with Sprig prints
for the same template and record (Go's documented rules: fmt's %v, map keys sorted, missing keys, truth,
comparisons of one kind only)."""

from __future__ import annotations

import re

import pytest

from airflow_conduit.gotemplate import Template, TemplateExecError, TemplateSyntaxError
from airflow_conduit.gotemplate.opencdc import from_record_dict
from airflow_conduit.gotemplate.values import format_float

RECORD = from_record_dict(
    {
        "position": b"pos-7",
        "operation": "update",
        "metadata": {"table": "orders", "opencdc.readAt": "1700000000000000000"},
        "key": b"k1",
        "payload": {
            "before": {"name": "Ann"},
            "after": {"name": "Ann Lee", "qty": 2.0, "price": 1234567.0, "tags": ["a", "b"], "note": None},
        },
    }
)


def run(source: str, dot: object = RECORD) -> str:
    return Template.parse(source).execute(dot)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('{{ eq .Metadata.table "orders" }}', "true"),
        ('{{ eq .Metadata.table "refunds" "orders" }}', "true"),  # eq with several: any
        ('{{ ne .Metadata.table "orders" }}', "false"),
        ("{{ .Payload.After.name }}", "Ann Lee"),
        ("{{ .Payload.Before.name }}", "Ann"),
        ("{{ .Payload.After.missing }}", "<no value>"),  # map[string]interface{}
        ("[{{ .Metadata.missing }}]", "[]"),  # map[string]string: the zero value
        ("{{ .Payload.After.note }}", "<nil>"),
        ("{{ .Operation }}", "update"),
        ("{{ .Position }}", "pos-7"),  # Position has a String method
        ("{{ .Key }}", "[107 49]"),  # RawData has none: a []byte prints as numbers
        ("{{ .Payload.After.qty }}", "2"),
        ("{{ .Payload.After.price }}", "1.234567e+06"),
        ("{{ .Payload.After.tags }}", "[a b]"),
        ("{{ .Payload.Before }}", "map[name:Ann]"),
        ('{{ index .Metadata "opencdc.readAt" }}', "1700000000000000000"),
        ("{{ len .Payload.After.tags }}", "2"),
        ("{{ .Payload.After.name | upper }}", "ANN LEE"),
        ('{{ .Payload.After.name | replace " " "_" | lower }}', "ann_lee"),
        ('{{ printf "%s:%v:%d" .Metadata.table .Payload.After.qty 5 }}', "orders:2:5"),
        ('{{ printf "%.2f" .Payload.After.qty }}', "2.00"),
        (
            '{{ if eq .Metadata.table "x" }}x{{ else if eq .Metadata.table "orders" }}o{{ else }}-{{ end }}',
            "o",
        ),
        ("{{ with .Payload.After.missing }}set{{ else }}unset{{ end }}", "unset"),
        ("{{ with .Payload.After.name }}{{ . }}!{{ end }}", "Ann Lee!"),
        ("{{ range $i, $t := .Payload.After.tags }}{{ $i }}={{ $t }};{{ end }}", "0=a;1=b;"),
        ("{{ range .Payload.After.missing }}x{{ else }}empty{{ end }}", "empty"),
        ("{{ $n := .Payload.After.name }}{{ $n }}", "Ann Lee"),
        ("a  {{- 1 -}}  b", "a1b"),
        ("a {{/* a comment */}}b", "a b"),
        ('{{ and 1 0 2 }} {{ or 0 "" 3 }} {{ not 0 }}', "0 3 true"),
        ('{{ default "none" .Metadata.missing }} {{ empty .Payload.After.missing }}', "none true"),
        ('{{ ternary "big" "small" (gt (len .Payload.After.tags) 1) }}', "big"),
        (
            "{{ toJson .Payload.After.tags }} {{ .Payload.After | toJson }}",
            '["a","b"] {"name":"Ann Lee","note":null,"price":1234567,"qty":2,"tags":["a","b"]}',
        ),
        ('{{ "hi" | b64enc }} {{ "aGk=" | b64dec }}', "aGk= hi"),
        ('{{ hasPrefix "Ann" .Payload.After.name }} {{ contains "Lee" .Payload.After.name }}', "true true"),
        ('{{ regexReplaceAll "[aeiou]" .Payload.After.name "*" }}', "Ann L**"),
        ('{{ substr 0 3 .Payload.After.name }} {{ trunc 2 "abc" }} {{ trimPrefix "A" "Ann" }}', "Ann ab nn"),
        ("{{ add 1 2 3 }} {{ sub 5 7 }} {{ div -7 2 }} {{ mod 7 3 }} {{ max 1 9 4 }}", "6 -2 -3 1 9"),
        ('{{ (dict "a" 1 "b" "x").b }} {{ list 1 "a" 2.5 }}', "x [1 a 2.5]"),
        ('{{ splitList "," "a,b,c" | join "-" }}', "a-b-c"),
        ("{{ 010 }} {{ 0x1F }} {{ 'a' }} {{ 1e3 }} {{ -2 }}", "8 31 97 1000 -2"),
        ('{{ "a\\tb" }}|{{ `raw\\t` }}', "a\tb|raw\\t"),
    ],
)
def test_templates_print_what_go_prints(source: str, expected: str) -> None:
    assert run(source) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (21.5, "21.5"),
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-3.0, "-3"),
        (0.1 + 0.2, "0.30000000000000004"),
        (float("inf"), "+Inf"),
        (-0.0, "-0"),
    ],
)
def test_floats_print_as_fmt_prints_them(value: float, expected: str) -> None:
    assert format_float(value) == expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{{ .Key.name }}", "can't evaluate field name in type opencdc.RawData"),
        ('{{ eq .Payload.After.qty "2" }}', "incompatible types for comparison"),
        ('{{ eq .Operation "update" }}', "incompatible types for comparison"),  # an int kind and a string
        ('{{ eq .Position "pos-7" }}', "incompatible types for comparison"),  # []byte: (toString .Position)
        ("{{ .Nope }}", "can't evaluate field Nope in type Record"),
        ("{{ .Payload.After.missing.deeper }}", "nil pointer evaluating"),
        ('{{ fail "stop here" }}', "stop here"),
        ("{{ index .Payload.After.tags 5 }}", "index out of range: 5"),
        ("{{ div 1 0 }}", "integer divide by zero"),
    ],
)
def test_what_go_cannot_evaluate_is_an_error_for_that_record(source: str, message: str) -> None:
    with pytest.raises(TemplateExecError, match=message):
        run(source)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{{ nosuch .Key }}", 'function "nosuch" not defined'),
        ("{{ if .Key }}yes", "missing {{end}}"),
        ("{{ .Key", "unclosed action"),
        ("{{ end }}", "unexpected {{end}}"),
        ('{{ if true }}{{ define "x" }}{{ end }}{{ end }}', 'unexpected "define" in command'),
        ('{{ template "x" }}', 'no template "x" is defined'),
        ("{{ template .Name }}", "unexpected '.Name' in template clause"),
        ('{{ define "a" }}1{{ end }}{{ define "a" }}2{{ end }}', 'multiple definition of template "a"'),
        ('{{ define "a" }}{{ $x }}{{ end }}{{ $x := 1 }}', "undefined variable '$x'"),
        ("{{ date }}{{ nowish }}", 'function "nowish" not defined'),
        ("{{ $x }}", "undefined variable '$x'"),
        ("{{ 1 }}x\n{{ ) }}", "line 2: missing value for command"),
        ("{{ .A.B.C | }}", "missing value for command"),
    ],
)
def test_bad_templates_are_refused_when_parsed(source: str, message: str) -> None:
    with pytest.raises(TemplateSyntaxError, match=re.escape(message)):
        Template.parse(source)


def test_random_functions_give_a_new_value_per_record() -> None:
    template = Template.parse("{{ uuidv4 }}")
    values = {template.execute(RECORD) for _ in range(50)}
    assert len(values) == 50 and all(len(v) == 36 for v in values)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ eq .Payload.After.qty 2 }}", "true"),
        ("{{ eq .Payload.After.qty 2.0 }}", "true"),
        ("{{ lt .Payload.After.qty 3 }}", "true"),
        ("{{ gt .Payload.After.qty 2.5 }}", "false"),
    ],
)
def test_numbers_compare_across_int_and_float(source: str, expected: str) -> None:
    # Go refuses int against float64; JSON numbers are float64 in Conduit but typed here, so both of a
    # Conduit user's spellings must work (a documented leniency).
    assert run(source) == expected
