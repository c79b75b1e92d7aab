"""A debt's grace ends at the gym's midnight (spec B 3, gymctl.billing.days: "The same rule in
Python (`grace_ends`) and as SQL (`day_n_ends`) for the set-based lifecycle, so the pass and the
booking refusal agree"). On PostgreSQL the lifecycle computes it with `AT TIME ZONE`, on the
embedded default (and so in every forecast, whose scratch copy is SQLite) with Python's
zoneinfo. They disagreed by an hour where the local midnight happens twice (Atlantic/Azores on
the last Sunday of October, America/Havana on the first Sunday of November: the clocks go back
from 01:00 to 00:00): Python takes the first midnight, PostgreSQL took the second. The forecast
(issue 24: "compares every subscription's status, dates and ledger: identical") then cancelled
the plan an hour before the daemons did on PostgreSQL, and a retry due in that hour was
collected by the daemons but never by the forecast. (The zone names PostgreSQL reads as
abbreviations, CET, EET, MET and WET, are no gym's zone any more: test_gym_zone_names.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import forecast as fc
from gymctl.billing.days import day_n_ends
from gymctl.clock import day_n_ends as py_day_n_ends
from gymctl.db import get_engine, session_factory
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import PlanType
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.forecast_pg_gym import run_daemons_hourly

H = timedelta(hours=1)


def _gym_in_debt(session, zone, *, debt_since, retry_at):
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=debt_since - timedelta(days=400))
    bf.make_billing_settings(session, gym.organization, timezone=zone, billing_grace_days=2)
    user = factories.user(session)
    membership = factories.membership(session, user=user, organization=gym.organization)
    card = bf.make_card(session, gym, user=user)
    sub = bf.make_subscription(
        session,
        gym,
        PlanType.card,
        membership=membership,
        payment_method_id=card.id,
        now=debt_since - timedelta(days=30),
        in_debt_since=debt_since,
        next_charge_date=debt_since,
        retry_at=retry_at,
    )
    session.commit()
    return gym, sub


# (zone, the debt's start, the midnight that ends day 2 as zoneinfo reads it)
CASES = [
    # The clocks go back at 01:00 to 00:00 on Oct 25th 2026: midnight twice (00:00 and 01:00 UTC).
    (
        "Atlantic/Azores",
        datetime(2026, 10, 22, 12, tzinfo=UTC),
        datetime(2026, 10, 25, 0, tzinfo=UTC),
    ),
    # Summer time in Central Europe: local midnight is 22:00 UTC.
    (
        "Europe/Brussels",
        datetime(2027, 7, 6, 12, tzinfo=UTC),
        datetime(2027, 7, 8, 22, tzinfo=UTC),
    ),
]


SQL_CASES = [
    *((zone, since, 2, ends) for zone, since, ends in CASES),
    # The first Sunday of November 2026 in Havana: 01:00 goes back to 00:00.
    (
        "America/Havana",
        datetime(2026, 10, 30, 12, tzinfo=UTC),
        1,
        datetime(2026, 11, 1, 4, tzinfo=UTC),
    ),
    # Where CET, EET and WET stand now (migration 0024): summer time, as Python reads them.
    (
        "Europe/Athens",
        datetime(2027, 7, 6, 12, tzinfo=UTC),
        2,
        datetime(2027, 7, 8, 21, tzinfo=UTC),
    ),
    (
        "Europe/Lisbon",
        datetime(2027, 7, 6, 12, tzinfo=UTC),
        2,
        datetime(2027, 7, 8, 23, tzinfo=UTC),
    ),
]


@pytest.mark.parametrize(
    ("zone", "since", "days", "ends"), SQL_CASES, ids=[c[0] for c in SQL_CASES]
)
def test_the_grace_end_sql_is_zoneinfos_on_postgresql(committed_pg, zone, since, days, ends):
    """The SQL rule and the Python rule name the same midnight (gymctl.billing.days)."""
    assert py_day_n_ends(since, days, zone) == ends
    with session_factory(get_engine(committed_pg))() as session:
        sql = session.scalar(select(day_n_ends(since, days, zone)))
    assert sql == ends


@pytest.mark.parametrize(("zone", "since", "ends"), CASES, ids=[c[0] for c in CASES])
def test_the_forecast_cancels_when_the_daemons_on_postgresql_do(
    committed_pg, tmp_path, zone, since, ends
):
    """The debt's retry is due at the first tick of the gym's midnight that ends its grace.
    The forecast's lifecycle (SQLite: zoneinfo) cancels the plan at that tick; the daemons'
    lifecycle on PostgreSQL does not yet, and their collector retries it and is paid."""
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym, sub = _gym_in_debt(session, zone, debt_since=since, retry_at=ends)
    org = gym.organization.id
    start = since + H
    until = ends + 6 * H
    with factory() as session:
        forecast = fc.simulate(
            session, org, now=start, until=until, cipher=TEST_CIPHER, by="day", scratch_dir=tmp_path
        )
    run_daemons_hourly(factory, until, fc.SeededCardProvider(), start=start)
    with factory() as session:
        real = session.get(Subscription, sub.id)
        real_ledger = sorted(
            (str(t.type), str(t.status), t.amount_in_cents, str(t.attempt_kind), t.created_at)
            for t in session.scalars(
                select(PaymentTransaction).where(PaymentTransaction.subscription_id == sub.id)
            )
        )
    [row] = [r for r in forecast.final["subscriptions"] if r["id"] == sub.id]
    forecast_ledger = sorted(
        (str(t["type"]), str(t["status"]), t["amount_in_cents"], str(t["attempt_kind"]),
         t["created_at"])
        for t in forecast.final["payment_transactions"]
        if t["subscription_id"] == sub.id
    )  # fmt: skip
    assert (row["status"], row["cancelled_at"], forecast_ledger) == (
        real.status,
        real.cancelled_at,
        real_ledger,
    )
