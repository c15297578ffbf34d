"""What the CLI's commands share: loading a pipeline file with a readable error, logging setup."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from airflow_conduit.errors import EXIT_CONFIG

if TYPE_CHECKING:
    from airflow_conduit.config.model import PipelineFile


def fail(message: str) -> int:
    """Print ``message`` to stderr; the exit code of a usage or config mistake."""
    print(message, file=sys.stderr)
    return EXIT_CONFIG


def load_pipeline_file(path: str) -> PipelineFile | None:
    """The validated pipeline file, or ``None`` after printing why it was refused (file, line, field).

    What Conduit would warn about (an unknown field, no version, an unset variable) is printed to stderr as
    ``warning: FILE:LINE: FIELD: MESSAGE`` and the file loads."""
    from airflow_conduit.config import ConfigError
    from airflow_conduit.config import load_pipeline_file as load

    try:
        loaded = load(path)
        for warning in loaded.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        return loaded
    except ConfigError as error:
        fail(str(error))
        return None
    except OSError as error:
        fail(f"{path}: cannot read the pipeline file: {error.strerror or error}")
        return None


def setup_logging() -> None:
    """Progress lines on stderr; py4j and pyspark only when they warn."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
