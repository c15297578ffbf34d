"""The driver JVM's options (engine/jvm.py): the native heap's trimming only where the JVM knows it,
found from the installation's ``release`` file without starting a JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_conduit.engine import jvm


def fake_java(tmp_path: Path, release: str | None) -> Path:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    if release is not None:
        (tmp_path / "jdk" / "release").write_text(release)
    return java


@pytest.mark.parametrize(
    ("release", "version"),
    [
        ('IMPLEMENTOR="Debian"\nJAVA_VERSION="17.0.15"\nJAVA_VERSION_DATE="2025-04-15"\n', (17, 0, 15)),
        ('JAVA_VERSION="21"\n', (21, 0, 0)),
        ('JAVA_VERSION="21.0.1"\n', (21, 0, 1)),
        ('JAVA_VERSION="1.8.0_392"\n', (1, 8, 0)),
        ('IMPLEMENTOR="x"\n', None),
        (None, None),
    ],
)
def test_the_version_comes_from_the_release_file(tmp_path: Path, release: str | None, version: tuple) -> None:
    assert jvm.java_version(fake_java(tmp_path, release)) == version


@pytest.mark.parametrize(
    ("version", "trims"),
    [
        ((17, 0, 8), False),
        ((17, 0, 9), True),
        ((17, 0, 15), True),
        ((18, 0, 2), False),
        ((20, 0, 2), False),
        ((21, 0, 0), False),
        ((21, 0, 1), True),
        ((22, 0, 0), True),
        ((25, 0, 1), True),
        ((1, 8, 0), False),
        (None, False),
    ],
)
def test_trimming_only_where_the_jvm_has_the_switch(version: tuple | None, trims: bool) -> None:
    assert jvm.trims_native_heap(version) is trims
    if version is not None:
        options = jvm.driver_jvm_options(version)
        assert options.startswith(jvm.DRIVER_GC_OPTIONS)
        assert (jvm.TRIM_NATIVE_HEAP_OPTIONS in options) is trims


def test_without_a_readable_java_the_driver_goes_without_trimming(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm, "_java", lambda: None)
    assert jvm.driver_jvm_options() == jvm.DRIVER_GC_OPTIONS
