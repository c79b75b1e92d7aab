"""Dry runs tell the truth (issue 19, defect 12): every billing sweep has one, it lists what
that sweep would touch by the sweep's own selection, under the same caps (spec B 8: "at most
20 organizations and 5 subscriptions per organization; no new work started after a 30 s
monotonic budget"), and it sends and keeps nothing."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import dry_runs
from gymctl.billing.refunds import begin_refund
from gymctl.billing.sweeps import SWEEPS, run_sweep
from gymctl.models import PaymentTransaction
from gymctl.models.billing import PlanType
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing_ops.helpers import card_subscription, paid_charge, pending_attempt
from tests.conftest import NOW

LATER = NOW + timedelta(minutes=5)


def _due(session, gym, count=1, since=timedelta(hours=1)):
    return [
        bf.make_subscription(session, gym, PlanType.card, next_charge_date=NOW - since)
        for _ in range(count)
    ]


@pytest.mark.embedded
@pytest.mark.parametrize("name", list(SWEEPS))
def test_every_sweep_has_a_dry_run_that_sends_and_keeps_nothing(
    session, session_factory, settings, gym, card_server, name
):
    _due(session, gym)
    session.commit()
    rows = session.scalar(select(func.count()).select_from(PaymentTransaction))
    answer = run_sweep(name, session_factory, LATER, settings, dry_run=True)
    assert answer["dryRun"] is True
    assert card_server.requests("Transactions/Transaction") == 0
    session.expire_all()
    assert session.scalar(select(func.count()).select_from(PaymentTransaction)) == rows


def test_the_recovery_dry_run_lists_what_recovery_would_touch(session, gym, card_server, documents):
    renewal = card_subscription(session, gym, card_server)  # due, but not recovery's work
    stuck = pending_attempt(session, card_subscription(session, gym, card_server))
    debt = bf.make_subscription(
        session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=1), next_charge_date=NOW
    )
    refund = begin_refund(
        session,
        transaction=paid_charge(session, gym, card_server),
        amount_cents=100,
        reason="x",
        actor_user_id=None,
        now=NOW,
        documents=documents,
    )

    listed = dry_runs.recovery(session, LATER)

    assert listed["pendingAttempts"] == [str(stuck.id)]
    assert listed["debts"] == [{"organizationId": str(gym.organization.id), "due": [str(debt.id)]}]
    assert str(renewal.id) not in str(listed)
    assert listed["refunds"] == [str(refund.id)]


def test_the_catch_up_dry_run_keeps_to_20_organizations_and_5_subscriptions_each(session):
    gyms = [bf.make_gym(session) for _ in range(21)]
    for gym in gyms:
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
    _due(session, gyms[0], count=6, since=timedelta(hours=2))  # due first: always chosen
    for gym in gyms[1:]:
        _due(session, gym)

    listed = dry_runs.catch_up(session, LATER)

    assert len(listed["organizations"]) == 20
    assert max(len(entry["due"]) for entry in listed["organizations"]) == 5
    assert listed["completed"] is True
    ticks = itertools.count(0, 10)  # 10 s per organization: the third one starts at 30 s
    stopped = dry_runs.catch_up(session, LATER, monotonic=lambda: next(ticks))
    assert (len(stopped["organizations"]), stopped["completed"]) == (2, False)
