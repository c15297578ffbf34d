"""Go's time formatting and parsing, Sprig's date functions and named templates (define/template/block).

Expected values are those Go's and Sprig's documentation print: the ``time`` package's layout constants
and examples (``time.Date(2009, time.November, 10, 23, 0, 0, 0, time.UTC)``, ``ExampleParse``,
``ExampleTime_Format``, ``ExampleDuration_Round``), and Sprig's date function docs."""

from __future__ import annotations

import re
import time

import pytest

from airflow_conduit.config.template_sql import condition_sql, text_sql
from airflow_conduit.gotemplate import Template, TemplateExecError, TemplateSyntaxError
from airflow_conduit.gotemplate.gotime import (
    GoTime,
    duration_text,
    parse_duration,
    round_duration,
)
from airflow_conduit.gotemplate.gotime_parse import TimeParseError, parse_time
from airflow_conduit.gotemplate.opencdc import from_record_dict

NOV_10 = GoTime(1257894000 * 1_000_000_000)  # time.Date(2009, time.November, 10, 23, 0, 0, 0, time.UTC)


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("2006-01-02T15:04:05Z07:00", "2009-11-10T23:00:00Z"),  # RFC3339
        ("Mon, 02 Jan 2006 15:04:05 MST", "Tue, 10 Nov 2009 23:00:00 UTC"),  # RFC1123
        ("Mon, 02 Jan 2006 15:04:05 -0700", "Tue, 10 Nov 2009 23:00:00 +0000"),  # RFC1123Z
        ("3:04PM", "11:00PM"),  # Kitchen
        ("Mon Jan _2 15:04:05 2006", "Tue Nov 10 23:00:00 2009"),  # ANSIC
        ("02 Jan 06 15:04 MST", "10 Nov 09 23:00 UTC"),  # RFC822
        ("2006-01-02", "2009-11-10"),  # DateOnly
        ("15:04:05", "23:00:00"),  # TimeOnly
        ("Monday, January 2 2006 (day 002)", "Tuesday, November 10 2009 (day 314)"),
    ],
)
def test_layouts_go_documents(layout: str, expected: str) -> None:
    assert NOV_10.format(layout) == expected


def test_string_is_gos_default_format() -> None:
    assert str(NOV_10) == "2009-11-10 23:00:00 +0000 UTC"


def test_example_time_format_fractions_padding_and_am_pm() -> None:
    # ExampleTime_Format: "Wed Feb 25 11:06:39 PST 2015" parsed as UnixDate, then formatted.
    t = parse_time("Mon Jan _2 15:04:05 MST 2006", "Wed Feb 25 11:06:39 PST 2015")
    assert t.format("Mon Jan 2 15:04:05 MST 2006") == "Wed Feb 25 11:06:39 PST 2015"
    assert t.format("2006/01/02") == "2015/02/25"
    assert t.format("3PM==3pm==15h") == "11AM==11am==11h"
    fraction = t.add(123_400_000)
    assert fraction.format("15:04:05.00000") == "11:06:39.12340"
    assert fraction.format("15:04:05.99999999") == "11:06:39.1234"
    assert fraction.format("Mon Jan _2 15:04:05 MST 2006") == "Wed Feb 25 11:06:39 PST 2015"
    assert (
        parse_time("2006-01-02", "2015-02-03").format("Jan _2 | Jan 02 | Jan 2") == "Feb  3 | Feb 03 | Feb 3"
    )


@pytest.mark.parametrize(
    ("layout", "value", "expected"),
    [
        # ExampleParse
        ("Jan 2, 2006 at 3:04pm (MST)", "Feb 3, 2013 at 7:54pm (PST)", "2013-02-03 19:54:00 +0000 PST"),
        ("2006-Jan-02", "2013-Feb-03", "2013-02-03 00:00:00 +0000 UTC"),
        ("2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05Z", "2006-01-02 15:04:05 +0000 UTC"),
        ("2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05+07:00", "2006-01-02 15:04:05 +0700 +0700"),
        # a fraction the layout does not name is read anyway
        (
            "2006-01-02T15:04:05Z07:00",
            "2021-01-21T18:40:12.345678999Z",
            "2021-01-21 18:40:12.345678999 +0000 UTC",
        ),
    ],
)
def test_parse_as_go_documents(layout: str, value: str, expected: str) -> None:
    assert str(parse_time(layout, value)) == expected


@pytest.mark.parametrize(
    ("layout", "value", "message"),
    [
        (  # ExampleParse: the layout is not a time
            "2006-01-02T15:04:05Z07:00",
            "2006-01-02T15:04:05Z07:00",
            'parsing time "2006-01-02T15:04:05Z07:00": extra text: "07:00"',
        ),
        (  # Conduit's field.convert test
            "2006-01-02T15:04:05.999999999Z07:00",
            "21.01.2021 18:40:12",
            'parsing time "21.01.2021 18:40:12" as "2006-01-02T15:04:05.999999999Z07:00": cannot parse '
            '"21.01.2021 18:40:12" as "2006"',
        ),
        ("2006-01-02", "2021-13-01", 'parsing time "2021-13-01": month out of range'),
        ("2006-01-02", "2021-02-30", 'parsing time "2021-02-30": day out of range'),
        (
            "2006-01-02",
            "2021/02/03",
            'parsing time "2021/02/03" as "2006-01-02": cannot parse "/02/03" as "-"',
        ),
    ],
)
def test_parse_errors_are_gos(layout: str, value: str, message: str) -> None:
    with pytest.raises(TimeParseError) as caught:
        parse_time(layout, value)
    assert str(caught.value) == message


def test_durations_as_go_prints_and_parses_them() -> None:
    hour, minute, ms = 3600 * 10**9, 60 * 10**9, 10**6
    assert duration_text(hour + 2 * minute + 300 * ms) == "1h2m0.3s"
    assert duration_text(300 * ms) == "300ms"
    assert duration_text(0) == "0s"
    assert duration_text(1500) == "1.5µs"
    assert duration_text(-90 * 10**9) == "-1m30s"
    assert duration_text(parse_duration("1h10m10s")) == "1h10m10s"
    assert duration_text(parse_duration("1µs")) == duration_text(parse_duration("1us")) == "1µs"
    assert parse_duration("4h35m") == 16500 * 10**9
    assert parse_duration("-1.5h") == -90 * minute
    d = parse_duration("1h15m30.918273645s")
    assert duration_text(round_duration(d, 10**9)) == "1h15m31s"
    assert duration_text(round_duration(d, ms)) == "1h15m30.918s"
    for bad, message in [
        ("1", 'time: missing unit in duration "1"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("x", 'time: invalid duration "x"'),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_duration(bad)


RECORD = from_record_dict(
    {"metadata": {"day": "2017-12-31"}, "payload": {"after": {"ts": 1257894000, "when": "2009-11-10"}}}
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [  # Sprig's documented examples, and Go's types deciding what a function reads
        ('{{ toDate "2006-01-02" "2017-12-31" | date "02/01/2006" }}', "31/12/2017"),
        ('{{ toDate "2006-01-02" .Metadata.day | htmlDate }}', "2017-12-31"),
        ('{{ duration "95" }}', "1m35s"),
        ("{{ duration 95 }}", "0s"),  # an int constant is not an int64: Sprig reads 0
        ("{{ duration .Payload.After.ts }}", "349415h0m0s"),  # a record's integer is an int64
        ('{{ durationRound "2h10m5s" }}', "2h"),
        ('{{ durationRound "400h" }}', "16d"),
        ('{{ date "2006-01-02 15:04" .Payload.After.ts }}', "2009-11-10 23:00"),  # int: Unix seconds
        (
            '{{ dateInZone "2006-01-02 15:04 MST" .Payload.After.ts "America/New_York" }}',
            "2009-11-10 18:00 EST",
        ),
        ('{{ date_in_zone "15:04" .Payload.After.ts "No/Such_Zone" }}', "23:00"),  # unknown zone: UTC
        ('{{ htmlDateInZone .Payload.After.ts "Asia/Tokyo" }}', "2009-11-11"),
        (
            '{{ toDate "2006-01-02" .Payload.After.when | dateModify "-1.5h" | date "2006-01-02 15:04" }}',
            "2009-11-09 22:30",
        ),
        (
            '{{ toDate "2006-01-02" .Payload.After.when | date_modify "bogus" | date "2006-01-02" }}',
            "2009-11-10",
        ),
        ('{{ toDate "2006-01-02" .Payload.After.when | unixEpoch }}', "1257811200"),
        ('{{ (toDate "2006-01-02" .Payload.After.when).Unix }}', "1257811200"),
        ('{{ toDate "2006-01-02" "not a date" }}', "0001-01-01 00:00:00 +0000 UTC"),  # zero time
        ('{{ toDate "2006-01-02" .Payload.After.when | toJson }}', '"2009-11-10T00:00:00Z"'),
        ('{{ (mustToDate "2006-01-02" "2009-11-10").Year }}', "2009"),
    ],
)
def test_sprig_date_functions(source: str, expected: str) -> None:
    assert Template.parse(source).execute(RECORD) == expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('{{ mustToDate "2006-01-02" "2009/11/10" }}', 'cannot parse "/11/10" as "-"'),
        ('{{ toDate "2006-01-02" "2009-11-10" | mustDateModify "1d" }}', 'unknown unit "d"'),
        ('{{ unixEpoch "2009-11-10" }}', "expected time.Time; got string"),
    ],
)
def test_date_functions_that_fail_fail_the_record(source: str, message: str) -> None:
    with pytest.raises(TemplateExecError, match=re.escape(message)):
        Template.parse(source).execute(RECORD)


def test_now_and_ago_read_the_clock() -> None:
    before = time.time_ns()
    stamp = int(Template.parse("{{ (now).UnixNano }}").execute(RECORD))
    assert before <= stamp <= time.time_ns()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \+0000 UTC m=\+\d+\.\d{9}",
        Template.parse("{{ now }}").execute(RECORD),
    )
    assert Template.parse('{{ date "2006" now }}').execute(RECORD) == time.strftime("%Y", time.gmtime())
    # `date` of a value of another type (a string) formats now, as Sprig does
    assert Template.parse('{{ date "2006" "2001" }}').execute(RECORD) == time.strftime("%Y", time.gmtime())
    ten_seconds_ago = time.time_ns() // 10**9 - 10
    assert Template.parse("{{ ago .Payload.After.ts }}").execute(
        from_record_dict({"payload": {"after": {"ts": ten_seconds_ago}}})
    ) in ("10s", "11s")


@pytest.mark.parametrize(
    "source",
    [
        "{{ now }}",
        '{{ eq (date "2006" now) "2026" }}',
        '{{ eq (date "2006" .Payload.After.ts) "2009" }}',  # date falls back to now for other types
        "{{ ago .Payload.After.ts }}",
        "{{ eq .Metadata.day (htmlDate 0) }}",
        "{{ uuidv4 }}",
        '{{ define "t" }}{{ now }}{{ end }}{{ eq .Metadata.day "x" }}{{ template "t" }}',
    ],
)
def test_clock_and_random_templates_are_never_spark_sql(source: str) -> None:
    template = Template.parse(source)
    assert not template.deterministic
    assert condition_sql(template) is None
    assert text_sql(template) is None


def test_deterministic_templates_still_translate() -> None:
    template = Template.parse('{{ eq .Metadata.day "x" }}')
    assert template.deterministic
    assert condition_sql(template) is not None
    assert Template.parse('{{ toDate "2006-01-02" .Metadata.day | unixEpoch }}').deterministic


# ---- define / template / block (text/template's documented behaviour) ----
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # text/template's package example: T3 invokes T1 and T2
        (
            '{{define "T1"}}ONE{{end}}{{define "T2"}}TWO{{end}}'
            '{{define "T3"}}{{template "T1"}} {{template "T2"}}{{end}}{{template "T3"}}',
            "ONE TWO",
        ),
        ('{{define "name"}}[{{.}}]{{end}}{{template "name" .Metadata.day}}', "[2017-12-31]"),
        ('{{define "none"}}{{.}}{{end}}{{template "none"}}', "<no value>"),  # no pipeline: nil dot
        ('{{block "b" .Metadata.day}}<{{.}}>{{end}} {{template "b" "again"}}', "<2017-12-31> <again>"),
        # a later definition of an empty template replaces it; a block's body is its default
        ('{{define "b"}}{{end}}{{define "b"}}x{{end}}{{template "b"}}', "x"),
        (
            '{{define "row"}}{{$}}:{{.}}{{end}}{{range $i, $v := .Payload.After.list}}{{template "row" $v}};{{end}}',
            "a:a;b:b;",
        ),
        (
            '{{define "t"}}{{if .}}yes{{else}}no{{end}}{{end}}{{template "t" true}}/{{template "t" false}}',
            "yes/no",
        ),
    ],
)
def test_named_templates(source: str, expected: str) -> None:
    record = from_record_dict({"metadata": {"day": "2017-12-31"}, "payload": {"after": {"list": ["a", "b"]}}})
    assert Template.parse(source).execute(record) == expected


def test_a_template_that_calls_itself_forever_fails_the_record() -> None:
    with pytest.raises(TemplateExecError, match="maximum template depth"):
        Template.parse('{{define "r"}}x{{template "r"}}{{end}}{{template "r"}}').execute(RECORD)


def test_named_templates_are_never_spark_sql_but_their_functions_are_checked() -> None:
    assert condition_sql(Template.parse('{{define "t"}}true{{end}}{{template "t"}}')) is None
    with pytest.raises(TemplateSyntaxError, match='function "nope" not defined'):
        Template.parse('{{define "t"}}{{ nope }}{{end}}x')


def test_mod_is_exact_on_int64_as_go_computes_it() -> None:
    # Nanosecond stamps are beyond float64's exact integers: Go's % on int64 is exact.
    assert Template.parse("{{ mod 1795564762676681757 2 }} {{ mod -7 3 }}").execute(RECORD) == "1 -1"
