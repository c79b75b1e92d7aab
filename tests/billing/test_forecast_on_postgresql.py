"""Issue 24's forecast (SQLite scratch copy) against the real sweeps on PostgreSQL: "compares
every subscription's status, dates and ledger: identical"."""

from __future__ import annotations

import pprint
from datetime import UTC, datetime, timedelta

import pytest

from gymctl.billing import forecast as fc
from gymctl.db import get_engine, session_factory
from tests.billing.factories import TEST_CIPHER
from tests.billing.forecast_pg_gym import build, differences, real_state, run_daemons_hourly
from tests.conftest import NOW

DAYS = 60


def _forecast_is_the_daemons(factory, org, labels, *, start, until, rate, seed, tmp_path):
    """Forecast the gym read from PostgreSQL, then run the daemons hourly on PostgreSQL itself
    with the same provider answers, and assert every subscription and ledger row equal."""
    with factory() as session:
        forecast = fc.simulate(
            session, org, now=start, until=until, cipher=TEST_CIPHER,
            decline_rate=rate, seed=seed, scratch_dir=tmp_path,
        )  # fmt: skip
    run_daemons_hourly(factory, until, fc.SeededCardProvider(rate, seed=seed), start=start)
    with factory() as session:
        subs, ledger, _bookings = real_state(session, org)
    diff = differences(
        forecast.final["subscriptions"],
        subs,
        forecast.final["payment_transactions"],
        ledger,
        labels,
    )
    assert diff == [], pprint.pformat(diff, width=120)


@pytest.mark.parametrize(("same_token", "rate", "seed"), [(False, 0.3, 7)])
def test_forecast_from_postgresql_is_what_the_daemons_do_on_postgresql(
    committed_pg, tmp_path, same_token, rate, seed
):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym, labels = build(session, same_token=same_token)
        org = gym.organization.id
    _forecast_is_the_daemons(
        factory, org, labels, start=NOW, until=NOW + timedelta(days=DAYS),
        rate=rate, seed=seed, tmp_path=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("zone", "base", "months", "days"),
    [
        # The whole gym in the Azores across the clocks going back (October 25th 2026): the
        # forecast cancelled a debt an hour before the daemons on PostgreSQL (days.py). A run
        # across Jerusalem's clocks going forward (March 2027) and one of every card on one
        # token at a rate of 0.5 were identical too (s58; left out of CI for its time).
        ("Atlantic/Azores", datetime(2026, 10, 23, 9, tzinfo=UTC), -1, 45),
    ],
    ids=["azores-fall-back"],
)
def test_the_whole_gym_across_a_clock_change(committed_pg, tmp_path, zone, base, months, days):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym, labels = build(session, base=base, months=months, zone=zone)
        org = gym.organization.id
    _forecast_is_the_daemons(
        factory, org, labels, start=base, until=base + timedelta(days=days),
        rate=0.4, seed=5, tmp_path=tmp_path,
    )  # fmt: skip
