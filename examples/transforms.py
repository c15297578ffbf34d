"""Functions for ``custom.python`` (used by ``examples/custom-python.yaml`` and
``examples/python-destination.yaml``).

A function gets one OpenCDC record as a plain dict::

    {"position": b"...", "operation": "create", "metadata": {"opencdc.collection": "orders", ...},
     "key": b"17", "payload": {"before": None, "after": {"order_id": 1, ...}}}

Structured data arrives as dicts, raw data as bytes. Return the record (changed in place or a new dict),
``None`` to filter it out, or raise: ``TransientError`` / ``FatalError`` stop the pipeline, any other
exception nacks just this record to the dead-letter queue with the exception as its error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from airflow_conduit.errors import FatalError

EXPRESS_FEE_CENTS = 499


def enrich_order(record: dict[str, Any]) -> dict[str, Any] | None:
    after = record["payload"]["after"]
    if after is None:  # a delete: nothing to enrich
        return record
    if not isinstance(after, dict):
        # Raw data (bytes) would need json.decode first: a configuration mistake, not a bad record.
        raise FatalError("enrich_order expects structured orders; add a json.decode processor")
    amount = after["amount_cents"]
    if amount == 0:
        return None  # an empty order: drop it
    if amount % 250 == 0:
        raise ValueError(f"suspicious round amount {amount} for order {after['order_id']}")
    total = amount + (EXPRESS_FEE_CENTS if after.get("express") else 0)
    after["total"] = f"{total / 100:.2f}"
    after["customer"] = mask(after["customer"])
    record["metadata"]["enriched.by"] = "transforms.enrich_order"
    return record


def mask(name: str) -> str:
    """Keep the first letter of a customer name: ``charlie-2402`` -> ``c***``."""
    return name[:1] + "***" if name else name


def append_ledger(records: list[dict[str, Any]], delivery_hash: str) -> None:
    """A ``custom.python`` destination: append a micro-batch to a ledger file exactly once.

    A replayed batch (after a crash) arrives again with the same ``delivery_hash``: the ledger keeps
    the hashes it holds, so the replay is recognised and not appended twice.
    """
    ledger = Path(os.environ.get("CONDUIT_LEDGER", "demo-output/ledger.jsonl"))
    ledger.parent.mkdir(parents=True, exist_ok=True)
    seen = ledger.with_suffix(".deliveries")
    if seen.exists() and delivery_hash in seen.read_text().split():
        return
    with ledger.open("a") as out:
        for record in records:
            out.write(json.dumps({"delivery": delivery_hash, "after": record["payload"]["after"]}) + "\n")
    with seen.open("a") as marks:  # after the data: a crash in between appends the batch again
        marks.write(delivery_hash + "\n")
