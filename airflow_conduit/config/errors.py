"""Configuration errors: every problem in a pipeline file, each pointing at a line and a field path."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a pipeline file: ``FILE:LINE: FIELD_PATH: MESSAGE``."""

    file: str
    line: int | None
    field_path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        # Problems of the whole document (YAML syntax, an empty file) have no field path.
        if self.field_path:
            return f"{where}: {self.field_path}: {self.message}"
        return f"{where}: {self.message}"


class ConfigError(Exception):
    """A pipeline file is invalid; holds all of its issues (validation does not stop at the first one)."""

    def __init__(self, issues: Iterable[ConfigIssue]) -> None:
        self.issues: list[ConfigIssue] = list(issues)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(issue) for issue in self.issues)
