"""One audit event in words, for the events table of the pipeline page (pure Python: no Airflow, no FastAPI).

The audit log (``STATE_DIR/PIPELINE_ID/audit.jsonl``) is written by the engine (``started``, ``fault``,
``stopped``, ``degraded``, ``refused``, ``delivery_skipped``, ``skipping_acked``, ``stop_requested``), by
recovery (``recovering``, ``restarted``, ``degraded``, ``stopped``), by the operator (``reattached``), by
acknowledgements (``acked``), by replays (``replay_requested``, ``replayed``) and by reviews in the
Airflow UI (``dlq_reviewed``). Each has a sentence here;
an event this module does not know is still shown, as its name and its fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Event = Mapping[str, Any]

BASE_FIELDS = ("time", "event", "pipeline")
"""Fields every event has; the rest are its details."""


def details(event: Event) -> dict[str, Any]:
    """The event's own fields (without time, name and pipeline)."""
    return {k: v for k, v in event.items() if k not in BASE_FIELDS}


def duration_text(seconds: Any) -> str:
    """``4 s``, ``2.5 s``, ``3 min``, ``1 h 30 min``; ``?`` when ``seconds`` is not a number."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "?"
    if seconds < 60 or seconds != int(seconds):
        return f"{seconds:g} s"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p)


def error_text(error: Any, *, kind: str | None = None) -> str:
    """``a transient error source_failed at orders:in`` (``kind`` overrides the error's own)."""
    if not isinstance(error, Mapping) or not error:
        return "an error"
    kind = kind or error.get("kind") or error.get("classification")
    code = error.get("code") or "error"
    text = f"a {kind} error {code}" if kind else f"an error {code}"
    if error.get("node"):
        text += f" at {error['node']}"
    return text


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _by(event: Event) -> str:
    user = event.get("user")
    return f" by {user}" if user else ""


def _count(n: Any, one: str, many: str | None = None) -> str:
    many = many or one + "s"
    return f"{n} {one if n == 1 else many}"


def _started(e: Event) -> str:
    mode = {"until_idle": "until idle", "continuous": "continuously"}.get(str(e.get("mode")), e.get("mode"))
    text = f"Run started ({mode})" if mode else "Run started"
    airflow = e.get("airflow")
    if isinstance(airflow, Mapping) and airflow.get("dag_id"):
        text += f" by Airflow task {airflow.get('dag_id')}.{airflow.get('task_id')}"
        if airflow.get("run_id"):
            text += f", run {airflow['run_id']}"
        if airflow.get("try_number") is not None:
            text += f", try {airflow['try_number']}"
    if e.get("master"):
        text += f" on {e['master']}"
    return text


def _fault(e: Event) -> str:
    text = error_text(e, kind=e.get("classification"))
    message = e.get("message")
    return text[0].upper() + text[1:] + (f": {message}" if message else "")


def _recovering(e: Event) -> str:
    return (
        f"Restart attempt {e.get('attempt', '?')} scheduled in {duration_text(e.get('delay'))} "
        f"after {error_text(e.get('error'))}"
    )


def _restarted(e: Event) -> str:
    return f"Restart attempt {e.get('attempt', '?')} began after a wait of {duration_text(e.get('delay'))}"


def _degraded(e: Event) -> str:
    error = _mapping(e.get("error"))
    reason = e.get("reason")
    if reason:
        text = f"Degraded: {reason}"
    else:
        text = f"Degraded by {error_text(error)}"
        if error.get("message"):
            text += f": {error['message']}"
    return text + "; retrying will not help until the cause is fixed"


def _stopped(e: Event) -> str:
    if e.get("reason"):
        return f"Stopped: {e['reason']}"
    records = _mapping(e.get("records"))
    if not records:
        return "Stopped gracefully"
    written = records.get("written")
    total = sum(v for v in written.values() if isinstance(v, int)) if isinstance(written, Mapping) else 0
    text = f"Stopped gracefully: {_count(records.get('read', 0), 'record')} read, {total} written"
    if records.get("filtered"):
        text += f", {records['filtered']} filtered"
    if records.get("dlq"):
        text += f", {records['dlq']} to the DLQ"
    return text


def _holder(holder: Any) -> str:
    if not isinstance(holder, Mapping):
        return "another engine"
    text = f"pid {holder.get('pid')} on {holder.get('host')}"
    if holder.get("owner"):
        text += f", started by {holder['owner']}"
    return text


def _refused(e: Event) -> str:
    return f"Run refused: the pipeline is already running ({_holder(e.get('holder'))})"


def _reattached(e: Event) -> str:
    try_number = e.get("try_number")
    who = f"Airflow try {try_number}" if try_number is not None else "Airflow"
    return f"{who} reattached to the engine still running ({_holder(e.get('holder'))})"


def _acked(e: Event) -> str:
    text = f"Record at position {e.get('position')} acknowledged{_by(e)}"
    if e.get("source"):
        text += f" (source {e['source']})"
    text += ": it is never written nor replayed"
    if e.get("reason"):
        text += f"; reason: {e['reason']}"
    return text


def _replayed(e: Event) -> str:
    text = (
        f"DLQ replayed{_by(e)}: {e.get('replayed', 0)} replayed, {e.get('delivered', 0)} delivered, "
        f"{e.get('filtered', 0)} filtered, {e.get('failed_again', 0)} failed again, "
        f"{e.get('remaining', 0)} remaining"
    )
    if isinstance(e.get("error"), Mapping):
        text += f"; the replay stopped on {error_text(e['error'])}"
    return text


def _replay_requested(e: Event) -> str:
    return f"DLQ replay requested{_by(e)} (process {e.get('pid', '?')})"


def _dlq_reviewed(e: Event) -> str:
    what = "poison" if e.get("kind") == "poison" else "DLQ"
    who = _by(e) if e.get("user") else (" by the timeout's default" if e.get("timed_out") else "")
    text = (
        f"Review of {_count(e.get('records', 0), what + ' record')}: {e.get('action', '?')} chosen{who}; "
        f"{e.get('replayed', 0)} replayed, {e.get('failed_again', 0)} failed again, "
        f"{e.get('skipped', 0)} skipped, {e.get('left', 0)} left"
    )
    if e.get("resume"):
        text += "; the pipeline resumes"
    if e.get("reason"):
        text += f"; reason: {e['reason']}"
    if isinstance(e.get("error"), Mapping) and e["error"].get("code"):
        text += f"; the replay stopped on {error_text(e['error'])}"
    return text


def _delivery_skipped(e: Event) -> str:
    destinations = e.get("destinations") or []
    names = ", ".join(str(d) for d in destinations) if isinstance(destinations, list) else str(destinations)
    return f"Batch {e.get('batch', '?')} was already delivered to {names}: not written again"


def _skipping_acked(e: Event) -> str:
    positions = _list(e.get("positions"))
    return f"This run skips {_count(len(positions), 'acknowledged record')}: " + ", ".join(
        str(p) for p in positions
    )


def _stop_requested(e: Event) -> str:
    text = "Graceful stop requested"
    if e.get("timeout_seconds") is not None:
        text += f": the batch in flight gets {duration_text(e['timeout_seconds'])} to finish"
    return text


TEXTS: dict[str, Callable[[Event], str]] = {
    "started": _started,
    "fault": _fault,
    "recovering": _recovering,
    "restarted": _restarted,
    "degraded": _degraded,
    "stopped": _stopped,
    "refused": _refused,
    "reattached": _reattached,
    "acked": _acked,
    "replayed": _replayed,
    "replay_requested": _replay_requested,
    "dlq_reviewed": _dlq_reviewed,
    "delivery_skipped": _delivery_skipped,
    "skipping_acked": _skipping_acked,
    "stop_requested": _stop_requested,
}


def _generic(e: Event) -> str:
    name = str(e.get("event") or "event").replace("_", " ")
    fields = ", ".join(f"{k} {v}" for k, v in details(e).items() if v not in (None, "", [], {}))
    return name[:1].upper() + name[1:] + (f": {fields}" if fields else "")


def describe(event: Event) -> str:
    """The event in words: what happened, with its numbers, errors and who did it."""
    text = TEXTS.get(str(event.get("event")), _generic)
    try:
        return text(event)
    except (TypeError, ValueError, AttributeError):  # a hand-edited or foreign event: never fail the page
        return _generic(event)
