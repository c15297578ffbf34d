"""DLQ records as the engine stores them (engine/batch.py ``_stage_dlq``): the failed record in
``.Payload.After``, its metadata plus the nack error and node, one JSON line each in ``STATE/P/dlq/``."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from airflow_conduit.dlq_tools import NACK_ERROR, NACK_NODE
from airflow_conduit.record import META_READ_AT, META_SOURCE_CONNECTOR
from airflow_conduit.state import PipelineState


def dlq_line(pipeline: str, position: str, error: str, read_at: datetime, *, source: str = "in") -> dict:
    encoded = base64.b64encode(position.encode()).decode()
    metadata = {
        META_READ_AT: str(int(read_at.timestamp() * 1e9)),
        META_SOURCE_CONNECTOR: f"{pipeline}:{source}",
    }
    failed = {
        "position": encoded,
        "operation": "create",
        "metadata": metadata,
        "key": {"id": position},
        "payload": {"before": None, "after": {"id": position}},
    }
    return {
        "position": encoded,
        "operation": "create",
        "metadata": {**metadata, NACK_ERROR: error, NACK_NODE: f"{pipeline}:check"},
        "key": {"id": position},
        "payload": {"before": None, "after": failed},
    }


def write_dlq(state: PipelineState, name: str, lines: list[dict]) -> None:
    state.dlq_dir.mkdir(parents=True, exist_ok=True)
    with (state.dlq_dir / name).open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(line) + "\n" for line in lines))
