"""The dead-letter queue: Conduit's nack window, and DLQ records.

The window is Conduit's ring buffer over the last ``window-size`` ack/nack outcomes in source order: a
nack is accepted while the nacks in the window, itself included, are at most
``window-nack-threshold``; the first nack past that stops the pipeline (fatal). ``window-size: 0``
accepts every nack. The window is carried across micro-batches and runs in the state dir, keyed by the
batch it follows so that a replayed batch starts from the same window again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_conduit.state import read_json, write_json_atomic


@dataclass
class NackWindow:
    size: int
    threshold: int
    outcomes: deque[bool] = field(default_factory=deque)  # True = nack, newest last

    def __post_init__(self) -> None:
        self.outcomes = deque(self.outcomes, maxlen=self.size if self.size > 0 else 0)

    @property
    def nacks(self) -> int:
        return sum(self.outcomes)

    def ack(self, count: int = 1) -> None:
        if self.size <= 0 or count <= 0:
            return
        self.outcomes.extend([False] * min(count, self.size))

    def nack(self) -> bool:
        """Record a nack; ``False`` when it crosses the threshold (the window then stays as it was)."""
        if self.size <= 0:
            return True
        held = list(self.outcomes)
        self.outcomes.append(True)
        if self.nacks > self.threshold:
            self.outcomes = deque(held, maxlen=self.size)
            return False
        return True

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "threshold": self.threshold, "outcomes": [int(x) for x in self.outcomes]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], size: int, threshold: int) -> NackWindow:
        outcomes = [bool(x) for x in data.get("outcomes", [])] if data.get("size") == size else []
        return cls(size, threshold, deque(outcomes))


@dataclass(frozen=True)
class Nack:
    rank: int
    """The record's place among all records of its micro-batch, in source order."""
    error: str
    node: str
    position: bytes


@dataclass(frozen=True)
class WindowVerdict:
    accepted: int
    rejected: Nack | None
    nacks_in_window: int


def feed(window: NackWindow, total_records: int, nacks: Iterable[Nack]) -> WindowVerdict:
    """Feed one micro-batch (``total_records`` outcomes, ``nacks`` among them) into the window."""
    done = 0
    accepted = 0
    for nack in sorted(nacks, key=lambda n: n.rank):
        window.ack(nack.rank - done)
        if not window.nack():
            return WindowVerdict(accepted, nack, window.nacks + 1)
        accepted += 1
        done = nack.rank + 1
    window.ack(total_records - done)
    return WindowVerdict(accepted, None, window.nacks)


@dataclass(frozen=True)
class WindowStore:
    """The window as it stood before and after the last batch that went through it."""

    path: Path

    def load(self, batch_id: int, size: int, threshold: int) -> NackWindow:
        saved = read_json(self.path) or {}
        # A replay of the batch the file was written for starts from the window before that batch.
        state = saved.get("before") if saved.get("batch_id") == batch_id else saved.get("after")
        return NackWindow.from_dict(state or {}, size, threshold)

    def save(self, batch_id: int, before: NackWindow, after: NackWindow) -> None:
        write_json_atomic(
            self.path, {"batch_id": batch_id, "before": before.to_dict(), "after": after.to_dict()}
        )
