"""A pipeline's dead-letter queue as an Airflow Asset: ``conduit://PIPELINE_ID/dlq``.

The operator declares it as an outlet and emits an event on it for each task run that put records into
the DLQ; the event's extra says how many (``records``), where they are (``path``, ``files``), the first
and last positions, and the error codes seen. A DAG scheduled on the asset can read them back with
:func:`airflow_conduit.dlq_tools.read_dlq_event` and replay fixed ones.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult

from airflow.sdk import Asset

from airflow_conduit.state import path_segment

SCHEME = "conduit"
DLQ_GROUP = "dead_letter_queue"
_PIPELINE_ID = re.compile(r"^(?!\.+$)[A-Za-z0-9._~-]+$")  # Conduit ids, `:` as `~`; not `.` or `..`


def dlq_uri(pipeline_id: str) -> str:
    """``conduit://PIPELINE_ID/dlq``; a ``:`` of a Conduit id (it would read as a port) is written as in the
    state dir's name (:func:`airflow_conduit.state.path_segment`): ``orders:v2`` is ``conduit://orders~v2/dlq``."""
    host = path_segment(pipeline_id or "")
    if not _PIPELINE_ID.match(host):
        raise ValueError(
            f"pipeline id {pipeline_id!r} cannot name a DLQ asset: use letters, digits and . _ : - "
            "(not . or ..)"
        )
    return f"{SCHEME}://{host}/dlq"


def dlq_asset(pipeline_id: str) -> Asset:
    """The DLQ of ``pipeline_id``: URI ``conduit://PIPELINE_ID/dlq``, group ``dead_letter_queue``.

    Equal assets compare equal, so the producing operator and a consuming DAG can each call this.
    """
    uri = dlq_uri(pipeline_id)
    return Asset(name=uri, uri=uri, group=DLQ_GROUP, extra={"pipeline_id": pipeline_id})


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normaliser of ``conduit://`` URIs (registered through ``asset-uris``).

    Accepts ``conduit://PIPELINE_ID/dlq``.
    """
    if not uri.netloc:
        raise ValueError("a conduit:// URI must name a pipeline: conduit://PIPELINE_ID/dlq")
    if not _PIPELINE_ID.match(uri.netloc):
        raise ValueError(f"invalid pipeline id in conduit URI: {uri.netloc!r}")
    if uri.path != "/dlq":
        raise ValueError(f"unknown conduit asset {uri.path!r}: only conduit://PIPELINE_ID/dlq is defined")
    return uri
