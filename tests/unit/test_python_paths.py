"""Zipping a ``custom.python`` ``path`` for the executors (the shipping itself: tests/integration)."""

from __future__ import annotations

import logging
import zipfile

from airflow_conduit.engine.processors._python_paths import zip_python_files


def test_zip_holds_the_python_files_and_is_named_by_their_content(tmp_path):
    source = tmp_path / "udfs"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / ".hidden").mkdir()
    (source / "mod.py").write_text("X = 1\n")
    (source / "pkg" / "__init__.py").write_text("")
    (source / "pkg" / "__pycache__" / "old.py").write_text("")
    (source / ".hidden" / "secret.py").write_text("")
    (source / "data.csv").write_text("a,b\n")
    first = zip_python_files(source, tmp_path / "zips")
    assert first is not None
    assert sorted(zipfile.ZipFile(first).namelist()) == ["mod.py", "pkg/__init__.py"]
    assert zip_python_files(source, tmp_path / "zips") == first  # same content, same zip
    (source / "mod.py").write_text("X = 2\n")
    changed = zip_python_files(source, tmp_path / "zips")
    assert changed is not None and changed != first
    assert zipfile.ZipFile(changed).read("mod.py") == b"X = 2\n"


def test_too_much_python_is_not_shipped_and_says_so(tmp_path, caplog):
    (tmp_path / "big.py").write_text("#" * 2000)
    with caplog.at_level(logging.WARNING, logger="airflow_conduit.custom_python"):
        assert zip_python_files(tmp_path, tmp_path / "zips", limit=1000) is None
    assert "not shipped to the executors" in caplog.text and str(tmp_path) in caplog.text
    assert not (tmp_path / "zips").exists()
