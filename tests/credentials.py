"""One check for the broker tests: a credential given in the settings appears nowhere a run leaves text
(its exit payload, the files of its state directory, what it logged)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest


def capture_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Record what a CLI run logs (INFO, cli/_common.py); the root logger's default WARNING would hide
    the connectors' INFO lines, where a URL with its password would most likely slip out."""
    caplog.set_level(logging.INFO)


def assert_not_shown(
    secrets: Iterable[str],
    payloads: Iterable[dict[str, Any]] = (),
    state_dirs: Iterable[Path] = (),
    caplog: pytest.LogCaptureFixture | None = None,
    capfd: pytest.CaptureFixture[str] | None = None,
) -> None:
    """Fails naming where a secret was found. ``capfd``: what this process wrote to stdout and stderr
    (read, so consumed, here)."""
    places: dict[str, str] = {"exit payload": json.dumps(list(payloads))}
    for root in state_dirs:
        for path in Path(root).rglob("*"):
            if path.is_file():
                places[str(path)] = path.read_text(errors="replace")
    if caplog is not None:
        assert caplog.records, "nothing logged: call capture_logs(caplog) before the runs"
        places["logs"] = caplog.text
    if capfd is not None:
        out, err = capfd.readouterr()
        places["stdout/stderr"] = out + err
    secrets = [s for s in secrets if s]
    assert secrets, "no secret to look for"
    for place, text in places.items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} shown in {place}"
