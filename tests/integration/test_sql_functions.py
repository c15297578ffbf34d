"""The engine's own SQL functions: compiled once per machine into the cache, registered per session."""

from __future__ import annotations

import zipfile

from airflow_conduit.engine import sql_functions
from airflow_conduit.record import VARIANT_JSON_FUNCTION


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
