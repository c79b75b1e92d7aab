"""The helpers of the one rate limiter (gymctl.ratelimit) that pace our own calls: the sliding
window shared through the database (`take`) and the two in-memory pieces for limits that are per
process by nature (`LocalWindow`, `Backoff`). The callers' fixed windows are in
tests/api/test_throttles.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl import db, ratelimit
from gymctl.models import RateWindow
from tests.billing_ops.helpers import race
from tests.conftest import NOW

KEY = "test:provider-calls"


def at(**delta) -> object:
    return NOW + timedelta(**delta)


def test_a_local_window_frees_slots_one_by_one() -> None:
    window = ratelimit.LocalWindow(3, timedelta(minutes=10))
    for minute in (0, 4, 8):
        assert window.take(at(minutes=minute)) is None
    assert window.take(at(minutes=9, seconds=59)) == 1
    assert window.take(at(minutes=10)) is None
    assert window.take(at(minutes=10)) == 4 * 60


def test_a_local_window_is_thread_safe() -> None:
    window = ratelimit.LocalWindow(100, timedelta(hours=1))

    def takes() -> int:
        return sum(window.take(NOW) is None for _ in range(25))

    assert sum(int(granted) for granted in race(16, takes)) == 100


def test_a_local_window_of_one_is_a_minimum_interval() -> None:
    """The key set's forced refetch: at most one in any ten seconds."""
    window = ratelimit.LocalWindow(1, timedelta(seconds=10))
    assert window.take(NOW) is None
    assert window.take(at(seconds=9, microseconds=999_999)) == 1
    assert window.take(at(seconds=10)) is None


def test_backoff_doubles_from_the_first_pause_to_the_cap_and_a_success_resets_it() -> None:
    backoff = ratelimit.Backoff(timedelta(seconds=1), timedelta(minutes=1))
    assert backoff.ready(NOW)
    pauses = [backoff.failed(NOW).total_seconds() for _ in range(8)]
    assert pauses == [1, 2, 4, 8, 16, 32, 60, 60]
    assert not backoff.ready(at(seconds=59))
    assert backoff.ready(at(seconds=60))
    backoff.succeeded()
    assert backoff.ready(NOW)
    assert backoff.failed(NOW) == timedelta(seconds=1)


def test_backoff_survives_a_long_outage() -> None:
    """2 ** failures would overflow timedelta after about 47 failures (45 minutes down at a
    one-minute cap), and the failed fetch would then leave no backoff at all."""
    backoff = ratelimit.Backoff(timedelta(seconds=1), timedelta(minutes=1))
    for _ in range(10_000):
        pause = backoff.failed(NOW)
    assert pause == timedelta(minutes=1)
    assert not backoff.ready(at(seconds=30))


@pytest.mark.embedded
def test_take_is_a_sliding_window_and_refusals_are_not_counted(engine, session) -> None:
    for minute in (0, 4, 8):
        assert (
            ratelimit.take(
                session, KEY, limit=3, window=timedelta(minutes=10), now=at(minutes=minute)
            )
            is None
        )
    refused = ratelimit.take(
        session, KEY, limit=3, window=timedelta(minutes=10), now=at(minutes=9, seconds=59)
    )
    assert refused == ratelimit.Spent(3, 1)
    assert (
        ratelimit.take(session, KEY, limit=3, window=timedelta(minutes=10), now=at(minutes=10))
        is None
    )
    refused = ratelimit.take(
        session, KEY, limit=3, window=timedelta(minutes=10), now=at(minutes=10)
    )
    assert refused == ratelimit.Spent(3, 4 * 60)
    used = session.scalar(select(func.sum(RateWindow.count)).where(RateWindow.key == KEY))
    assert used == 4  # three taken, one freed by time, one more taken; refusals left no row
    # Another key has its own window.
    assert (
        ratelimit.take(
            session, KEY + "-other", limit=3, window=timedelta(minutes=10), now=at(minutes=10)
        )
        is None
    )


@pytest.mark.embedded
def test_take_counts_two_takes_at_the_same_instant(engine, session) -> None:
    window = timedelta(hours=1)
    assert ratelimit.take(session, KEY, limit=2, window=window, now=NOW) is None
    assert ratelimit.take(session, KEY, limit=2, window=window, now=NOW) is None
    assert ratelimit.take(session, KEY, limit=2, window=window, now=NOW) == ratelimit.Spent(2, 3600)


def test_concurrent_processes_never_take_more_than_the_limit(committed_pg) -> None:
    """Sixteen workers, each its own connection and transaction, race for ten slots."""
    factory = db.session_factory(db.get_engine(committed_pg))

    def takes() -> int:
        granted = 0
        for _ in range(3):
            with factory() as session:
                refused = ratelimit.take(session, KEY, limit=10, window=timedelta(hours=1), now=NOW)
                session.commit()
            granted += refused is None
        return granted

    assert sum(int(granted) for granted in race(16, takes)) == 10
    with factory() as session:
        assert session.scalar(select(func.sum(RateWindow.count)).where(RateWindow.key == KEY)) == 10
