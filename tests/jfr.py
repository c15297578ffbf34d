"""The processes the driver's JVM starts, from its flight recorder (JFR's ``jdk.ProcessStart`` events)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def started_processes(spark, run: Callable[[], T], dump: Path) -> tuple[T, list[str]]:
    """What ``run()`` returned, and the command line of every process the JVM started meanwhile."""
    jvm = spark._jvm
    recording = jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    try:
        result = run()
    finally:
        recording.stop()
    dump_path = jvm.java.io.File(str(dump)).toPath()
    recording.dump(dump_path)
    recording.close()
    events = jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(dump_path)
    return result, [str(event.getString("command")) for event in events]
