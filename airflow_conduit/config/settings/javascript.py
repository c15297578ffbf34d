"""``custom.javascript``: Conduit's JavaScript processor's settings (``script`` or ``script.path``).

As in Conduit, exactly one of the two is given. ``script.path`` is relative to the pipeline file's
directory and read when the pipeline is loaded (the executors get the text, not the path). A script
that would not load (a syntax error, an exception at its top level, no ``process`` function) is
refused at ``validate``, where Conduit refuses it when the processor opens.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PrivateAttr, ValidationInfo, computed_field, field_validator, model_validator

from airflow_conduit.javascript import check_script

from ..spec import PluginSettings, PluginSpec


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"error reading script from path {path}: {error}") from None


def _check(source: str, where: str) -> None:
    problem = check_script(source)
    if problem is not None:
        at = f" ({where} line {problem.line})" if problem.line else ""
        raise ValueError(f"{problem}{at}")


class CustomJavascriptSettings(PluginSettings):
    script: str = ""
    """JavaScript defining ``process(record)``, which returns the record, a new ``Record()``, or
    ``null`` to filter the record out."""
    script_path: str = Field("", alias="script.path")
    """A ``.js`` file holding the script; stored absolute."""

    _source: str = PrivateAttr("")

    @field_validator("script")
    @classmethod
    def _check_script(cls, value: str) -> str:
        if value:
            _check(value, "script")
        return value

    @field_validator("script_path")
    @classmethod
    def _read_script(cls, value: str, info: ValidationInfo) -> str:
        if not value:
            return value
        base = Path((info.context or {}).get("base_dir") or ".")
        path = str((base / Path(value).expanduser()).resolve())
        _check(_read(path), path)
        return path

    @model_validator(mode="after")
    def _one_source(self) -> CustomJavascriptSettings:
        if self.script and self.script_path:
            raise ValueError("only one of: [script, script.path] should be provided")
        if not self.script and not self.script_path:
            raise ValueError("one of: [script, script.path] needs to be provided")
        self._source = self.script or _read(self.script_path)
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def source(self) -> str:
        """The script's text, as the engine runs it (shipped to the executors with the settings)."""
        return self._source


PROCESSOR = PluginSpec(
    "custom.javascript",
    "processor",
    CustomJavascriptSettings,
    engine="airflow_conduit.engine.processors.custom_javascript",
    pure=False,  # user code (Math.random(), Date.now()): a replay reads its stored decisions
)
