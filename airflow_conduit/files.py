"""One way to replace a file so that a reader, or a crash, never sees half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename.

    The data is fsynced before the rename and the directory after it, so the new file survives a power
    loss as well as a crash: state, delivery markers and the exit payload decide what a restart does, and
    they are small and written once per batch at most.

    :param mode: the file's permissions (``mkstemp`` makes 0600; a metrics scraper running as another
        user must read the file)
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
