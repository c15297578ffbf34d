"""The URI of a pipeline's DLQ asset, ``conduit://PIPELINE_ID/dlq``: pure Python, so the triggers can
name the asset without importing :mod:`airflow_conduit.assets` (which imports them)."""

from __future__ import annotations

import re

from airflow_conduit.state import path_segment

SCHEME = "conduit"
DLQ_GROUP = "dead_letter_queue"
PIPELINE_ID_PATTERN = re.compile(r"^(?!\.+$)[A-Za-z0-9._~-]+$")  # Conduit ids, `:` as `~`; not `.` or `..`


def dlq_uri(pipeline_id: str) -> str:
    """``conduit://PIPELINE_ID/dlq``; a ``:`` of a Conduit id (it would read as a port) is written as in the
    state dir's name (:func:`airflow_conduit.state.path_segment`): ``orders:v2`` is ``conduit://orders~v2/dlq``."""
    host = path_segment(pipeline_id or "")
    if not PIPELINE_ID_PATTERN.match(host):
        raise ValueError(
            f"pipeline id {pipeline_id!r} cannot name a DLQ asset: use letters, digits and . _ : - "
            "(not . or ..)"
        )
    return f"{SCHEME}://{host}/dlq"
