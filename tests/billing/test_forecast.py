"""The billing forecast (issue 24): the daemons' sweeps run on a scratch copy of one
organization, on a fixed clock; the real database is only read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import forecast as fc
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import PlanType
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

DAYS = 60
LEDGER = (
    "subscription_id",
    "type",
    "status",
    "provider",
    "amount_in_cents",
    "currency",
    "attempt_kind",
    "obligation_key",
    "created_at",
    "updated_at",
)


def small_gym(session):
    """Card renewals (one due tomorrow), a debt being retried, a presale opening in ten days,
    a cash plan that lapses, a pay-later pack and a gift: each on its own member."""
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))

    def member():
        user = factories.user(session)
        return user, factories.membership(session, user=user, organization=gym.organization)

    def card_sub(**fields):
        user, membership = member()
        card = bf.make_card(session, gym, user=user)
        return bf.make_subscription(
            session, gym, PlanType.card, membership=membership, payment_method_id=card.id, **fields
        )

    card_sub()
    card_sub(now=NOW - timedelta(days=29))
    card_sub(now=NOW - timedelta(days=20))
    card_sub(in_debt_since=NOW - timedelta(days=2), retry_at=NOW + timedelta(hours=5))
    card_sub(presale_opening=NOW + timedelta(days=10))
    bf.make_subscription(session, gym, PlanType.cash, membership=member()[1])
    bf.make_subscription(
        session, gym, PlanType.pack, membership=member()[1], pay_later_due=NOW + timedelta(days=3)
    )
    bf.make_subscription(session, gym, PlanType.gift, membership=member()[1])
    session.commit()
    return gym


def run_daemons_hourly(session_factory, until, provider):
    """The reference: the same jobs at every hourly tick (and the daily 02:00) on the test
    clock, on the real database. Every instant of `small_gym` falls on an hour."""
    jobs = fc.forecast_jobs(provider, TEST_CIPHER)
    at = NOW
    while at <= until:
        for job in jobs:
            if fc.next_tick(job, at) == at:
                job.run(session_factory, at)
        at += timedelta(hours=1)


def _rows(rows, columns=None):
    picked = [{k: v for k, v in row.items() if columns is None or k in columns} for row in rows]
    return sorted(picked, key=lambda row: sorted((k, str(v)) for k, v in row.items()))


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_forecast_is_what_the_daemons_do_on_the_test_clock(session, session_factory, tmp_path):
    """ "A test runs a small organization both ways, the forecast for 60 days and the real
    sweeps on the test clock for the same 60 days with the same provider answers, and compares
    every subscription's status, dates and ledger: identical." (issue 24)"""
    gym = small_gym(session)
    org = gym.organization.id
    until = NOW + timedelta(days=DAYS)
    before = session.scalar(select(func.count()).select_from(PaymentTransaction))

    forecast = fc.simulate(
        session,
        org,
        now=NOW,
        until=until,
        cipher=TEST_CIPHER,
        decline_rate=0.3,
        seed=7,
        scratch_dir=tmp_path,
    )

    # The real database was only read.
    assert session.scalar(select(func.count()).select_from(PaymentTransaction)) == before
    assert list(tmp_path.iterdir()) == []  # the scratch database is dropped

    run_daemons_hourly(session_factory, until, fc.SeededCardProvider(0.3, seed=7))
    session.expire_all()
    real_subs = [
        dict(r._mapping)
        for r in session.execute(
            select(Subscription.__table__).where(Subscription.organization_id == org)
        )
    ]
    real_ledger = [
        dict(r._mapping)
        for r in session.execute(
            select(PaymentTransaction.__table__).where(PaymentTransaction.organization_id == org)
        )
    ]
    assert _rows(forecast.final["subscriptions"]) == _rows(real_subs)
    assert _rows(forecast.final["payment_transactions"], LEDGER) == _rows(real_ledger, LEDGER)
    # The run was not trivial: money came in, a debt was opened, plans ended.
    periods = forecast.periods()
    assert sum(p["moneyInCents"] for p in periods) > 0
    assert sum(p["debtsOpened"] for p in periods) > 0
    assert sum(p["presalesOpened"] for p in periods) == 1
    assert sum(p["cancelledForNonPayment"] for p in periods) > 0
