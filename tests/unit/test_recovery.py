"""The recovery math: delays, validation, the sliding window, recovery off, reset after progress."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_conduit.recovery import (
    CANNOT_RECOVER,
    RecoveryPolicy,
    Restart,
    decide,
    made_progress,
    parse_duration,
)
from airflow_conduit.recovery.policy import format_duration

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def restart(at: datetime, attempt: int = 1, delay: float = 1.0) -> Restart:
    return Restart(decided_at=at, attempt=attempt, delay=timedelta(seconds=delay))


# policy ------------------------------------------------------------------------------------------
def test_conduit_defaults():
    p = RecoveryPolicy()
    assert p.min_delay == timedelta(seconds=1)
    assert p.max_delay == timedelta(minutes=10)
    assert p.backoff_factor == 2
    assert p.max_retries == -1
    assert p.max_retries_window == timedelta(minutes=5)
    assert p.enabled and p.infinite


def test_seconds_strings_and_timedeltas_are_equivalent():
    a = RecoveryPolicy(min_delay=2, max_delay=600, max_retries_window=300)
    b = RecoveryPolicy(min_delay="2s", max_delay="10m", max_retries_window="5m")
    c = RecoveryPolicy(min_delay=timedelta(seconds=2), max_delay=timedelta(minutes=10))
    assert a == b == c
    assert isinstance(a.min_delay, timedelta)


def test_exact_exponential_delays_capped_at_max():
    p = RecoveryPolicy()
    assert [d.total_seconds() for d in p.delays(12)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]


def test_delay_formula_with_other_factor():
    p = RecoveryPolicy(min_delay=0.5, max_delay=10, backoff_factor=3)
    assert [d.total_seconds() for d in p.delays(5)] == [0.5, 1.5, 4.5, 10, 10]


def test_factor_below_one_never_goes_below_min_delay():
    p = RecoveryPolicy(min_delay=4, max_delay=10, backoff_factor=0.5)
    assert [d.total_seconds() for d in p.delays(3)] == [4, 4, 4]
    assert RecoveryPolicy(min_delay=1, backoff_factor=0).delay_for(5) == S


def test_huge_attempt_does_not_overflow():
    assert RecoveryPolicy().delay_for(100_000) == timedelta(minutes=10)


def test_attempt_is_one_based():
    with pytest.raises(ValueError):
        RecoveryPolicy().delay_for(0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_delay": 0}, "min_delay must be positive"),
        ({"min_delay": -1}, "min_delay must be positive"),
        ({"max_delay": 0}, "max_delay must be positive"),
        ({"min_delay": 20, "max_delay": 10}, "must not be greater than max_delay"),
        ({"backoff_factor": -1}, "backoff_factor must be >= 0"),
        ({"max_retries": -2}, "max_retries must be >= -1"),
        ({"max_retries_window": 0}, "max_retries_window must be positive"),
        ({"min_delay": "soon"}, "expected a duration"),
        ({"max_retries": 1.5}, "expected an integer"),
    ],
)
def test_validation_as_conduit(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RecoveryPolicy(**kwargs)


def test_policy_is_frozen():
    with pytest.raises(AttributeError):
        RecoveryPolicy().max_retries = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1),
        ("500ms", 0.5),
        ("10m", 600),
        ("1h30m", 5400),
        ("2", 2),
        ("1.5", 1.5),
        (" 3s ", 3),
        ("1d", 86400),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["", "s", "1x", "1s2", True, float("inf")])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_format_duration():
    assert format_duration(timedelta(seconds=1)) == "1s"
    assert format_duration(timedelta(seconds=2.5)) == "2.5s"
    assert format_duration(timedelta(minutes=10)) == "10m"
    assert format_duration(timedelta(minutes=90)) == "1h30m"


def test_from_settings_accepts_conduit_spelling_and_skips_empty():
    p = RecoveryPolicy.from_settings(
        {
            "min-delay": "2s",
            "max_delay": "1m",
            "backoff-factor": "3",
            "max-retries": "4",
            "max_retries_window": "",
        }
    )
    assert p == RecoveryPolicy(min_delay=2, max_delay=60, backoff_factor=3, max_retries=4)
    with pytest.raises(ValueError, match="unknown recovery setting"):
        RecoveryPolicy.from_settings({"retries": 3})


def test_from_env_reads_airflow_variables_without_airflow():
    env = {"AIRFLOW__CONDUIT__MAX_RETRIES": "3", "AIRFLOW__CONDUIT__MIN_DELAY": "250ms", "OTHER": "x"}
    p = RecoveryPolicy.from_env(env)
    assert p.max_retries == 3 and p.min_delay == timedelta(milliseconds=250)
    assert p.max_delay == timedelta(minutes=10)


def test_dict_round_trip():
    p = RecoveryPolicy(min_delay=1.5, max_delay=30, backoff_factor=1.5, max_retries=7, max_retries_window=90)
    assert RecoveryPolicy.from_dict(p.to_dict()) == p


# decide ------------------------------------------------------------------------------------------
def test_first_failure_restarts_after_min_delay():
    d = decide(RecoveryPolicy(), [], now=T0)
    assert d.restart and d.attempt == 1 and d.delay == S
    assert d.start_at == T0 + S
    assert d.active_restarts == 0


def test_attempts_count_restarts_in_window_and_grow_delay():
    p = RecoveryPolicy(max_retries=5)
    history = [restart(T0, 1, 1), restart(T0 + 10 * S, 2, 2), restart(T0 + 20 * S, 3, 4)]
    d = decide(p, history, now=T0 + 30 * S)
    assert (d.action, d.attempt, d.delay) == ("restart", 4, 8 * S)


def test_never_clearing_failure_degrades_after_max_retries():
    p = RecoveryPolicy(min_delay=1, max_retries=3)
    history: list[Restart] = []
    now = T0
    delays = []
    runs = 1  # the first run
    while True:
        d = decide(p, history, now=now)
        if not d.restart:
            break
        delays.append(d.delay.total_seconds())
        history.append(Restart(decided_at=now, attempt=d.attempt, delay=d.delay))
        now = d.start_at + 5 * S  # the restarted run fails 5 s later
        runs += 1
    assert delays == [1, 2, 4]
    assert runs == 1 + p.max_retries
    assert d.action == "degraded" and d.attempt == 4
    assert "cannot recover" in d.reason and "max_retries=3" in d.reason


def test_restart_older_than_window_stops_counting():
    p = RecoveryPolicy(max_retries=1, max_retries_window=60)
    old = restart(T0, 1, 1)  # counts until T0 + 1 s + 60 s
    assert not decide(p, [old], now=T0 + 60 * S).restart  # still inside: degraded
    d = decide(p, [old], now=T0 + 61 * S)  # expired: attempt 1 again
    assert d.restart and d.attempt == 1 and d.delay == S


def test_window_counts_from_start_of_restart_like_conduit():
    # Conduit: time.AfterFunc(delay + window, attempts.Add(-1)): the delay extends the active period.
    p = RecoveryPolicy(max_retries=1, max_retries_window=10)
    r = restart(T0, 1, delay=30)
    assert r.expires_at(p.max_retries_window) == T0 + 40 * S
    assert not decide(p, [r], now=T0 + 39 * S).restart
    assert decide(p, [r], now=T0 + 40 * S).restart


def test_sliding_window_keeps_only_recent_restarts():
    p = RecoveryPolicy(max_retries=2, max_retries_window=100)
    history = [restart(T0, 1), restart(T0 + 50 * S, 2, 2)]
    assert not decide(p, history, now=T0 + 60 * S).restart  # both active
    d = decide(p, history, now=T0 + 110 * S)  # the first expired (T0+101s)
    assert d.restart and d.attempt == 2 and d.delay == 2 * S


def test_max_retries_zero_turns_recovery_off():
    p = RecoveryPolicy(max_retries=0)
    assert not p.enabled
    d = decide(p, [], now=T0)
    assert d.action == "degraded" and "turned off" in d.reason


def test_infinite_retries_never_degrade():
    p = RecoveryPolicy(max_retries=-1, max_retries_window=10_000)
    history = [restart(T0 + i * S, i + 1) for i in range(50)]
    d = decide(p, history, now=T0 + 60 * S)
    assert d.restart and d.attempt == 51 and d.delay == timedelta(minutes=10)


def test_progress_resets_the_count():
    p = RecoveryPolicy(max_retries=2)
    history = [restart(T0, 1), restart(T0 + 5 * S, 2, 2)]
    assert not decide(p, history, now=T0 + 10 * S).restart
    d = decide(p, history, now=T0 + 10 * S, progressed=True)
    assert d.restart and d.attempt == 1 and d.delay == S and d.reset


def test_decision_round_trip():
    d = decide(RecoveryPolicy(), [], now=T0, error={"kind": "transient", "code": "source_failed"})
    from airflow_conduit.recovery import RecoveryDecision

    assert RecoveryDecision.from_dict(d.to_dict()) == d
    assert CANNOT_RECOVER == "cannot_recover"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (None, False),
        ({}, False),
        ({"records": {"read": 10, "acked": 0}}, False),
        ({"records": {"acked": 1}}, True),
        ({"records": {"acked": 0, "filtered": 2}}, True),
        ({"records": {"dlq": 1}}, True),
        ({"records": {"acked": "x"}}, False),
    ],
)
def test_made_progress(payload, expected):
    assert made_progress(payload) is expected
