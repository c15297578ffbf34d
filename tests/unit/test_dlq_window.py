"""Conduit's nack window: which nack crosses the threshold, and how acks push nacks out."""

from __future__ import annotations

import pytest

from airflow_conduit.engine.dlq import Nack, NackWindow, WindowStore, feed


def nack_at(rank: int) -> Nack:
    return Nack(rank=rank, error=f"bad {rank}", node="p:proc", position=str(rank).encode())


def test_default_window_rejects_the_first_nack():
    window = NackWindow(size=1, threshold=0)
    window.ack(10)
    assert window.nack() is False


def test_window_size_zero_accepts_every_nack():
    window = NackWindow(size=0, threshold=0)
    assert all(window.nack() for _ in range(1000))


def test_threshold_counts_nacks_within_the_last_size_records():
    window = NackWindow(size=3, threshold=1)
    assert window.nack()  # [N]
    window.ack(1)  # [N, A]
    assert not window.nack()  # [N, A, N] holds 2 nacks > 1
    assert window.nacks == 1  # a rejected nack leaves the window as it was
    window.ack(2)  # [A, A, ...]: the old nack left the window
    assert window.nack()


def test_feed_names_the_nack_that_crosses():
    window = NackWindow(size=5, threshold=2)
    verdict = feed(window, total_records=100, nacks=[nack_at(10), nack_at(12), nack_at(13), nack_at(50)])
    assert verdict.rejected == nack_at(13)  # 10, 12, 13 are three nacks within five records
    assert verdict.accepted == 2
    assert verdict.nacks_in_window == 3


def test_feed_accepts_spread_out_nacks_and_carries_the_tail():
    window = NackWindow(size=5, threshold=1)
    verdict = feed(window, total_records=20, nacks=[nack_at(0), nack_at(10), nack_at(19)])
    assert verdict.rejected is None and verdict.accepted == 3
    # The batch ended on a nack: the next batch's first record, if nacked, makes two in the window.
    verdict = feed(window, total_records=5, nacks=[nack_at(0)])
    assert verdict.rejected == nack_at(0)


@pytest.mark.parametrize(
    ("size", "threshold", "ranks", "crossing"), [(1, 0, [3], 3), (10, 3, [0, 1, 2, 3, 4], 3)]
)
def test_feed_table(size, threshold, ranks, crossing):
    verdict = feed(NackWindow(size, threshold), 50, [nack_at(r) for r in ranks])
    assert verdict.rejected is not None and verdict.rejected.rank == crossing


def test_store_replays_a_batch_from_the_window_before_it(tmp_path):
    store = WindowStore(tmp_path / "window.json")
    before = NackWindow(3, 1)
    after = NackWindow(3, 1)
    after.nack()
    store.save(7, before, after)
    assert store.load(7, 3, 1).nacks == 0  # batch 7 replayed: start from the window before it
    assert store.load(8, 3, 1).nacks == 1  # the next batch continues from after batch 7
    assert store.load(8, 4, 1).nacks == 0  # a resized window starts empty
