"""Hold a trigger's event until the task that deferred has surely handed its worker back.

Under a real scheduler a task that defers ends its workload, and the scheduler later receives that
workload's exit from the executor. If the trigger fires first and the task is already running again,
the scheduler takes the late exit for the new run's and fails the task (Airflow 3.3's
``process_executor_events``: only a task back in ``scheduled`` is excused). ``dag.test()`` never shows
this: it runs triggers inline.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from airflow_conduit.state import format_time, parse_time


def not_before(threshold: timedelta) -> str:
    """The earliest time a trigger created now may fire (ISO-8601 UTC)."""
    return format_time(datetime.now(UTC) + threshold)


async def wait_for_hand_over(moment: str | None) -> None:
    """Sleep until ``moment`` (no-op when ``None`` or past)."""
    if not moment:
        return
    remaining = (parse_time(moment) - datetime.now(UTC)).total_seconds()
    if remaining > 0:
        await asyncio.sleep(remaining)
