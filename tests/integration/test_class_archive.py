"""The Spark driver's class-data archive (engine/jvm.py, engine/class_archive.py): named after the JVM
and the Spark jars, mapped only when it is there, and a real archive built here is one the JVM maps:
a CDS archive for this machine's default Java, an AOT cache for each Java 25+ installed beside it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.engine import class_archive, jvm
from airflow_conduit.engine.session import driver_java_options


@pytest.fixture
def fake_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``java`` and a fake Spark jars directory; the cache under ``tmp_path``."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"1")
    monkeypatch.setattr(jvm, "_java", lambda: java)
    monkeypatch.setattr(jvm, "_spark_jars", lambda: jars)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(jvm.ARCHIVE_ENV, raising=False)
    return tmp_path


def test_the_archive_is_named_after_the_jvm_and_the_jars(fake_install: Path) -> None:
    first = jvm.archive_path()
    assert first is not None and first.parent == fake_install / "cache" / "airflow-conduit"
    assert jvm.archive_path() == first  # stable while nothing changes
    (fake_install / "jars" / "spark-sql.jar").write_bytes(b"22")  # an upgrade adds or changes jars
    second = jvm.archive_path()
    assert second != first
    (fake_install / "jdk" / "bin" / "java").write_text("#!/bin/sh\n# another build\n")
    assert jvm.archive_path() not in (first, second)


def test_the_driver_maps_the_archive_only_when_it_is_built(
    fake_install: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = jvm.archive_path()
    assert path is not None
    # None built: no option (a missing file would turn off the JDK's own archive as well).
    assert "SharedArchiveFile" not in driver_java_options()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert f"-XX:SharedArchiveFile={path}" in driver_java_options()
    assert "SharedArchiveFile" not in driver_java_options(class_archive=False)
    monkeypatch.setenv(jvm.ARCHIVE_ENV, "off")
    assert "SharedArchiveFile" not in driver_java_options()
    chosen = fake_install / "mine.jsa"
    chosen.write_bytes(b"archive")
    monkeypatch.setenv(jvm.ARCHIVE_ENV, str(chosen))
    assert f"-XX:SharedArchiveFile={chosen}" in driver_java_options()


@pytest.mark.parametrize(
    ("release", "aot"),
    [
        ('JAVA_VERSION="17.0.15"\n', False),
        ('JAVA_VERSION="21.0.8"\n', False),
        ('JAVA_VERSION="25.0.3"\n', True),
    ],
)
def test_java_25_gets_an_aot_cache_and_older_javas_a_cds_archive(
    fake_install: Path, release: str, aot: bool
) -> None:
    (fake_install / "jdk" / "release").write_text(release)
    path = jvm.archive_path()
    assert path is not None and path.suffix == (".aot" if aot else ".jsa")
    assert jvm.archive_options() == ""  # not built yet
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    mapped, recorded = jvm.archive_options(), jvm.record_options(path)
    if aot:
        assert f"-XX:AOTCache={path}" in mapped and "SharedArchiveFile" not in mapped
        assert recorded == f"-XX:AOTCacheOutput={path}"
    else:
        assert f"-XX:SharedArchiveFile={path}" in mapped and "AOTCache" not in mapped
        assert recorded == f"-XX:ArchiveClassesAtExit={path}"


def _java_homes() -> list[Any]:
    """``None`` (the default Java: ``JAVA_HOME`` or ``PATH``), and each Java 25+ under ``/usr/lib/jvm``
    (in ``make test-e2e``: each is another 45 s)."""
    homes: list[Any] = [None]
    for release in sorted(Path("/usr/lib/jvm").glob("*/release")):
        home = release.parent
        if not home.is_symlink() and jvm.uses_aot_cache(jvm.java_version(home / "bin" / "java")):
            homes.append(pytest.param(str(home), marks=pytest.mark.engine))
    return homes


@pytest.mark.parametrize("java_home", _java_homes())
def test_a_built_archive_is_mapped_by_the_driver_and_a_broken_one_is_ignored(
    tmp_path: Path, java_home: str | None
) -> None:
    """Builds a real archive (a JVM runs a small pipeline, about 20-30 s), then runs a pipeline whose
    JVM must load Spark's classes from it."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop(jvm.ARCHIVE_ENV, None)
    if java_home:
        env["JAVA_HOME"] = java_home
    java = Path(java_home) / "bin" / "java" if java_home else jvm._java()
    aot = jvm.uses_aot_cache(jvm.java_version(java))
    built = subprocess.run(
        [sys.executable, "-m", "airflow_conduit.engine.class_archive"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    archives = list(
        (tmp_path / "cache" / "airflow-conduit").glob(f"spark-driver-*.{'aot' if aot else 'jsa'}")
    )
    assert len(archives) == 1 and archives[0].stat().st_size > 10_000_000
    assert not list((tmp_path / "cache" / "airflow-conduit").glob(".*")), "no partial file left"

    source = tmp_path / "in"
    source.mkdir()
    (source / "lines.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"""
version: "2.2"
pipelines:
  - id: mapped
    connectors:
      - {{id: in, type: source, plugin: builtin:file, settings: {{path: "{source}"}}}}
      - {{id: out, type: destination, plugin: builtin:file, settings: {{path: "{tmp_path / "out"}"}}}}
"""
    )

    def run(state: str, **extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "airflow_conduit.cli", "run", str(pipeline), "--until-idle"]
        return subprocess.run(
            [*command, "--state-dir", str(tmp_path / state)],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )

    # The class log names, for each class, the archive it came from. To a file: spark-submit's
    # launcher JVM (which gets these options too) must keep its standard output clean.
    classes = tmp_path / "classes.log"
    if aot:
        # An AOT cache replaces the JDK's own archive (about 1,300 classes) and holds Spark's too.
        share, marker, least = "", "source: shared objects file", 5000
    else:
        # -Xshare:on: a JVM that cannot map its archives fails to start ("top": the archive built
        # here, on the JDK's own).
        share, marker, least = "-Xshare:on ", "source: shared objects file (top)", 1000
    mapped = run("state-mapped", JDK_JAVA_OPTIONS=f"{share}-Xlog:class+load=info:file={classes}")
    assert mapped.returncode == 0, mapped.stderr[-2000:]
    from_archive = classes.read_text().count(marker)
    assert from_archive > least, f"{from_archive} classes came from the built archive"
    broken = tmp_path / "broken.jsa"
    broken.write_bytes(b"not an archive")
    ignored = run("state-broken", **{jvm.ARCHIVE_ENV: str(broken)})
    assert ignored.returncode == 0, ignored.stderr[-2000:]
    shown = ignored.stderr.lower()
    assert "archive" not in shown and "cds" not in shown and "aot" not in shown


def test_this_machines_java_takes_the_driver_options_and_trims_its_heap() -> None:
    """The options are given to the java spark-submit starts: it must start with them (an unknown
    option stops a JVM), with the trimming in effect."""
    java = jvm._java()
    assert java is not None, "no java on PATH or JAVA_HOME"
    flags = subprocess.run(
        [str(java), *jvm.driver_jvm_options().split(), "-XX:+PrintFlagsFinal", "-version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert flags.returncode == 0, flags.stderr[-2000:]
    interval = next(line for line in flags.stdout.splitlines() if " TrimNativeHeapInterval " in line)
    assert interval.split("=")[1].split()[0] == "1000"


def test_a_build_removes_the_archives_whose_java_or_jars_changed_or_are_gone(
    fake_install: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reinstall of pyspark (new jar times) or deleted virtualenv used to leave its archive behind."""
    cache = fake_install / "cache" / "airflow-conduit"
    cache.mkdir(parents=True)

    def built_for(java: Path, jars: Path) -> Path:
        archive = jvm.archive_file(java, jars)
        archive.write_bytes(b"archive")
        class_archive._inputs_record(archive).write_text(json.dumps({"java": str(java), "jars": str(jars)}))
        return archive

    java = fake_install / "jdk" / "bin" / "java"
    current = built_for(java, fake_install / "jars")
    other_venv = fake_install / "other" / "jars"
    other_venv.mkdir(parents=True)
    (other_venv / "spark-core.jar").write_bytes(b"1")
    kept_other = built_for(java, other_venv)
    deleted_venv = fake_install / "deleted" / "jars"
    deleted_venv.mkdir(parents=True)
    (deleted_venv / "spark-core.jar").write_bytes(b"1")
    gone = built_for(java, deleted_venv)
    shutil.rmtree(deleted_venv.parent)
    unrecorded = cache / "spark-driver-0123456789abcdef.jsa"  # built before inputs were recorded
    unrecorded.write_bytes(b"archive")
    (fake_install / "jars" / "spark-core.jar").write_bytes(b"22")  # pyspark reinstalled or upgraded
    upgraded = jvm.archive_path()
    assert upgraded is not None and upgraded != current

    removed = class_archive.prune_stale_archives(keep=upgraded)

    assert sorted(removed) == sorted([current, gone])
    assert sorted(path.name for path in cache.iterdir()) == sorted(
        [kept_other.name, class_archive._inputs_record(kept_other).name, unrecorded.name]
    )
