"""A pipeline's dead-letter queue as an Airflow Asset: ``conduit://PIPELINE_ID/dlq``.

The operator declares it as an outlet and emits an event on it for each task run that put records into
the DLQ; the event's extra says how many (``records``), where they are (``path``, ``files``), the first
and last positions, and the error codes seen. A DAG scheduled on the asset can read them back with
:func:`airflow_conduit.dlq_tools.read_dlq_event` and replay fixed ones.
"""

from __future__ import annotations

import os
from urllib.parse import SplitResult

from airflow.sdk import Asset

from airflow_conduit.asset_uris import DLQ_GROUP, PIPELINE_ID_PATTERN, dlq_uri
from airflow_conduit.state import path_segment


def dlq_asset(
    pipeline_id: str,
    *,
    state_dir: str | os.PathLike[str] | None = None,
    watch: bool = False,
    poll_interval: float = 2.0,
    airflow_api_conn_id: str | None = None,
) -> Asset:
    """The DLQ of ``pipeline_id``: URI ``conduit://PIPELINE_ID/dlq``, group ``dead_letter_queue``.

    Equal assets compare equal, so the producing operator and a consuming DAG can each call this.

    :param pipeline_id: the pipeline's id
    :param state_dir: the pipeline's state dir, as the triggerer sees it; required with ``watch``
    :param watch: attach an ``AssetWatcher`` whose trigger
        (:class:`airflow_conduit.triggers.dlq_watch.DLQWatchTrigger`) follows the DLQ store in the
        triggerer and emits one asset event per committed DLQ write while the pipeline runs, however it
        was started; the operator then leaves the announcing to it
    :param poll_interval: seconds between the watcher's looks at the DLQ store
    :param airflow_api_conn_id: with ``watch``, a connection to Airflow's REST API
        (:mod:`airflow_conduit.hooks.asset_events`): a DLQ write whose event a stopped triggerer may
        have stored is looked up there instead of announced again, so each write is announced once
        across triggerer restarts
    """
    uri = dlq_uri(pipeline_id)
    if not watch:
        return Asset(name=uri, uri=uri, group=DLQ_GROUP, extra={"pipeline_id": pipeline_id})
    if state_dir is None:
        raise ValueError(
            f"dlq_asset({pipeline_id!r}, watch=True) needs state_dir=: the directory the pipeline runs "
            "with (--state-dir), as the triggerer sees it"
        )
    from airflow.sdk import AssetWatcher  # only a watched asset needs the trigger's imports

    from airflow_conduit.triggers.dlq_watch import DLQWatchTrigger

    trigger = DLQWatchTrigger(
        pipeline_id=pipeline_id,
        state_dir=os.fspath(state_dir),
        poll_interval=poll_interval,
        airflow_api_conn_id=airflow_api_conn_id,
    )
    watcher = AssetWatcher(name=f"conduit-dlq-{path_segment(pipeline_id)}", trigger=trigger)
    return Asset(name=uri, uri=uri, group=DLQ_GROUP, extra={"pipeline_id": pipeline_id}, watchers=[watcher])


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normaliser of ``conduit://`` URIs (registered through ``asset-uris``).

    Accepts ``conduit://PIPELINE_ID/dlq``.
    """
    if not uri.netloc:
        raise ValueError("a conduit:// URI must name a pipeline: conduit://PIPELINE_ID/dlq")
    if not PIPELINE_ID_PATTERN.match(uri.netloc):
        raise ValueError(f"invalid pipeline id in conduit URI: {uri.netloc!r}")
    if uri.path != "/dlq":
        raise ValueError(f"unknown conduit asset {uri.path!r}: only conduit://PIPELINE_ID/dlq is defined")
    return uri
