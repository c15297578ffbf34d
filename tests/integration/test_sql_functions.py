"""The engine's own SQL functions: compiled once per machine into the cache, registered per session."""

from __future__ import annotations

import json
import threading
import zipfile

import orjson
import pytest

from airflow_conduit.engine import sql_functions
from airflow_conduit.record import (
    GO_JSON_FUNCTION,
    JSON_MAP_FUNCTION,
    MAP_JSON_FUNCTION,
    OPENCDC_LINE_FUNCTION,
    TRY_PARSE_JSON_FUNCTION,
    VARIANT_JSON_FUNCTION,
)
from tests.conftest import ESCAPED_TEXT


def test_the_jar_is_compiled_once_into_the_cache_and_reused(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    compiled = []
    compile_source = sql_functions._compile
    monkeypatch.setattr(sql_functions, "_compile", lambda *a: compiled.append(1) or compile_source(*a))

    jar = sql_functions.functions_jar(spark)
    assert jar.parent == tmp_path / "airflow-conduit"
    assert "org/airflowconduit/ConduitFunctions$VariantJson.class" in zipfile.ZipFile(jar).namelist()
    assert sql_functions.functions_jar(spark) == jar
    assert compiled == [1]
    assert not [p for p in jar.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_an_unwritable_cache_compiles_into_a_temporary_directory(spark, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))

    jar = sql_functions.functions_jar(spark)
    assert jar.exists() and not jar.is_relative_to(blocker)
    assert zipfile.ZipFile(jar).testzip() is None


def test_the_functions_are_registered_once_per_session(spark):
    sql_functions.register_functions(spark)  # again: a no-op
    assert spark.catalog.functionExists(VARIANT_JSON_FUNCTION)
    clone = spark.newSession()  # shares no temporary function: the engine registers them again
    sql_functions.register_functions(clone)
    [row] = clone.sql(f"SELECT {VARIANT_JSON_FUNCTION}(parse_json('[\"a\\\\tb\", 1]')) AS j").collect()
    assert row.j == '["a\\tb",1]'


def test_a_static_method_function_runs_in_generated_code_from_any_thread(spark):
    """``conduit_map_json`` is a static method Spark's generated code calls: the driver compiles that
    code with the thread's class loader, which must see the jar (Spark would fall back to running
    without generated code; with fallback off it fails). A new thread gets it from
    ``register_functions``, as the engine's runner calls it."""
    results: list[object] = []

    def query() -> None:
        try:
            sql_functions.register_functions(spark)
            rows = spark.sql(
                f"SELECT {MAP_JSON_FUNCTION}(map('a', cast(id AS string), 'b', NULL)) AS j FROM range(3)"
            ).collect()
            results.append([row.j for row in rows])
        except Exception as error:  # reported below, in the test's thread
            results.append(error)

    spark.conf.set("spark.sql.codegen.fallback", "false")
    try:
        worker = threading.Thread(target=query)
        worker.start()
        worker.join()
    finally:
        spark.conf.unset("spark.sql.codegen.fallback")
    assert results == [[f'{{"a":"{i}","b":null}}' for i in range(3)]]


def _try_parse_json_cases() -> list[bytes]:
    """JSON documents of every shape the engine's reader takes itself, and the ones it leaves to
    Spark: bad syntax, exponents, long numbers, surrogates, bytes that are not UTF-8, duplicates."""
    texts = [
        '{"id": 7, "kind": "refund", "amount": 473.93, "sku": "S51750"}',
        ' \t\r\n{ "a" : [ 1 , -2 , 0 , -0 , 0.0 , -0.50 , true , false , null , "" , {} , [] ] } \n',
        '"top"',
        "42",
        "-9",
        "null",
        "123456789012345678",  # 18 digits: a long here
        "1234567890123456789",  # 19: Spark's
        "-9223372036854775808",
        "99999999999999999999999",
        "0.12345678901234567890123456789012345678",  # 38 digits of scale
        "1.123456789012345678901234567890123456789",  # 39 digits: a double
        "1e5",
        "-2.5E-3",
        json.dumps(ESCAPED_TEXT),
        json.dumps(ESCAPED_TEXT, ensure_ascii=False),
        '"\\ud83d\\ude00 pair, \\u00e9, \\/"',
        '"\\ud800 alone"',
        '{"k": "v", "k": "w"}',
        json.dumps({f"key {i} é": [i, f"v{i}" * 20] for i in range(300)}),
        json.dumps({"k" * 300: {"nested": ["a" * 70, {"deep": [None, True, 1.5]}]}}),
        "[" * 600 + "]" * 600,
        "[" * 400 + "1" + "]" * 400,
        json.dumps({"k" * 60_000: 1}),  # over Jackson's longest name (50,000): Spark refuses it
        json.dumps({"k" * 30_000: 1}),
        "1 2",
        '{"a": 1} x',
        "",
        "   ",
        "tru",
        "nulls",
        "01",
        ".5",
        "+1",
        "1.",
        "-",
        "[1,]",
        '{"a":1,}',
        '{"a" 1}',
        "{'a': 1}",
        '"raw\ttab"',
        '"unterminated',
        '"bad escape \\x"',
        '"short \\u12"',
        "NaN",
        # Keys read again are the engine's kept strings: same hash, other bytes ("Aa", "BB"), escapes.
        '{"Aa": 1}',
        '{"BB": 2}',
        '{"BB": 1, "Aa": 2, "id": 3}',
        '{"a\\"b": 1, "a\\u0041": 2, "aB": 3, "é": 4, "id": 5}',
        # Decimals of up to 18 digits are read from their digits, longer ones as text.
        "[1234567890.12345678, -123456789012345.678, 123456789.0123456789, -0.00, -12.50, 0.05]",
    ]
    cases = [t.encode() for t in texts]
    cases += [b'"\xff\xfe not utf-8"', b'{"\xc3": 1}', b'"\xe2\x82"', b'"\xed\xa0\x80"', b"\xef\xbb\xbf{}"]
    return cases


def test_text_functions_called_twice_in_a_row_give_each_call_its_own_text(spark):
    """The text functions write into one buffer per thread, reused row after row: each call's string
    must be a copy of its own, or the second call in one row (both evaluated before the row is
    written) overwrites the first's. The first text is the longer, so a shared buffer would show the
    second's bytes with the first's tail. The values come from a row (``id``), so none is folded into a
    constant while the query is planned."""
    long_map, short_map = "map('a', repeat('x', 600 + id), 'b', 'y')", "map('c', cast(id AS string))"
    long_json, short_json = f"parse_json(to_json({long_map}))", "parse_json(to_json(array(id + 1, 2)))"
    nothing = "CAST(NULL AS VARIANT), CAST(NULL AS BINARY)"
    line = f"{{f}}(cast('p' AS binary), 'create', {{m}}, {nothing}, {nothing}, {{v}}, CAST(NULL AS BINARY))"
    [row] = spark.sql(
        "SELECT "
        + ", ".join(
            (
                f"{MAP_JSON_FUNCTION}({long_map}) AS map1, {MAP_JSON_FUNCTION}({short_map}) AS map2",
                f"{VARIANT_JSON_FUNCTION}({long_json}) AS json1",
                f"{VARIANT_JSON_FUNCTION}({short_json}) AS json2",
                f"{GO_JSON_FUNCTION}({long_json}, false) AS go1",
                f"{GO_JSON_FUNCTION}({short_json}, false) AS go2",
                line.format(f=OPENCDC_LINE_FUNCTION, m=long_map, v=long_json) + " AS line1",
                line.format(f=OPENCDC_LINE_FUNCTION, m=short_map, v=short_json) + " AS line2",
                f"to_json({long_map}) AS map_expected",
            )
        )
        + " FROM range(1)"
    ).collect()
    assert row.map1 == row.map_expected and json.loads(row.map2) == {"c": "0"}
    assert json.loads(row.json1) == json.loads(row.map_expected) and row.json2 == "[1,2]"
    assert json.loads(row.go1) == json.loads(row.map_expected) and row.go2 == "[1,2]"
    assert json.loads(row.line1)["metadata"] == json.loads(row.map_expected)
    assert json.loads(row.line2)["payload"]["after"] == [1, 2]


def test_map_json_of_rows_that_share_or_change_their_map_is_each_row_s_own(spark):
    """The map functions keep the last map's text per thread and compare the next row's map with it:
    runs of the same map, maps of the same size that differ by one byte, and a null between them each
    get their own text, in the function and in the OpenCDC line."""
    values = ["x1", "x1", "x1", "x2", "x2", None, "x1", "y1", "é1", "é1"]
    frame = spark.createDataFrame(
        [(i, {"a": v, "b": "same"} if v else None) for i, v in enumerate(values)],
        "i int, m map<string,string>",
    ).repartition(1)
    nothing = "CAST(NULL AS VARIANT), CAST(NULL AS BINARY)"
    rows = (
        frame.sortWithinPartitions("i")
        .selectExpr(
            "i",
            f"{MAP_JSON_FUNCTION}(m) AS text",
            f"{OPENCDC_LINE_FUNCTION}(cast('p' AS binary), 'create', m, {nothing}, {nothing}, {nothing}) AS line",
            "to_json(m) AS expected",
        )
        .collect()
    )
    assert len(rows) == len(values)
    for row in rows:
        assert row.text == row.expected, row.i
        metadata = json.loads(row.line)["metadata"]
        assert metadata == (None if row.expected is None else json.loads(row.expected)), row.i


def test_try_parse_json_of_bytes_is_spark_s_try_parse_json_to_the_byte(spark):
    """``conduit_try_parse_json`` gives the very variant (value and metadata bytes) Spark's
    ``try_parse_json`` gives for the same bytes as text, or NULL where that is NULL, whether its own
    reader takes the document or leaves it to Spark, and with duplicate keys allowed or not."""
    cases = _try_parse_json_cases()
    frame = spark.createDataFrame([(i, c) for i, c in enumerate(cases)], "i int, b binary")
    for duplicates in ("false", "true"):
        spark.conf.set("spark.sql.variant.allowDuplicateKeys", duplicates)
        try:
            rows = frame.selectExpr(
                "i", f"{TRY_PARSE_JSON_FUNCTION}(b) AS fast", "try_parse_json(cast(b AS string)) AS plain"
            ).collect()
        finally:
            spark.conf.unset("spark.sql.variant.allowDuplicateKeys")
        assert len(rows) == len(cases)
        for row in sorted(rows):
            fast = None if row.fast is None else (bytes(row.fast.value), bytes(row.fast.metadata))
            plain = None if row.plain is None else (bytes(row.plain.value), bytes(row.plain.metadata))
            assert fast == plain, cases[row.i][:80]
        parsed = sum(row.plain is not None for row in rows)
        assert 20 < parsed < len(cases)  # both kinds are in the cases


def test_json_map_reads_back_what_map_json_and_python_write(spark):
    """``conduit_json_map`` gives back the map ``conduit_map_json`` wrote (the metadata's way to a
    Python mapper and back, unchanged), and reads a mapper's own text of the metadata it changed: the
    compact JSON of orjson, and the json module's escapes of everything outside ASCII."""
    maps = [
        {"a": "1", "b": None, "c": ""},
        {'quote"back\\slash': "tab\tnew\nline\r\u0001\u001f/", "ü": "日本 😀"},
        {"escaped": ESCAPED_TEXT},
        {},
        None,
    ]
    frame = spark.createDataFrame([(i, m) for i, m in enumerate(maps)], "i int, m map<string,string>")
    rows = frame.selectExpr("i", f"{JSON_MAP_FUNCTION}({MAP_JSON_FUNCTION}(m)) AS back").collect()
    assert [row.back for row in sorted(rows)] == maps

    texts = [json.dumps(m) for m in maps[:4]] + [orjson.dumps(m).decode() for m in maps[:4]]
    texts.append(' { "spaced" : "out" , "n" : null } ')
    frame = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, t string")
    rows = frame.selectExpr("i", f"{JSON_MAP_FUNCTION}(t) AS m").collect()
    assert [row.m for row in sorted(rows)] == [*maps[:4], *maps[:4], {"spaced": "out", "n": None}]


@pytest.mark.parametrize("text", ['{"n": 1}', '{"a": "b"} x', '{"a": "b"', '["a"]', '{"a": "\\x"}'])
def test_json_map_refuses_what_is_not_an_object_of_strings(spark, text):
    frame = spark.createDataFrame([(text,)], "t string").selectExpr(f"{JSON_MAP_FUNCTION}(t) AS m")
    with pytest.raises(Exception, match="conduit_json_map: expected"):
        frame.collect()
