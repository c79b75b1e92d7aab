"""No renewal is charged once a notice is in effect (spec B 2.1, 3).

Spec B 3: the period-end sweep cancels a plan whose "cancellation_effective_at reached"; the
renewal pays the period after the one the notice ends. A renewal collected late (its technical
retry minutes away, or collection the owner paused and then resumed) has its date behind it:
a notice the member gives then takes effect at once (`give_notice`, the period read is over),
later than the renewal's date and the period's end, so neither term of the due rule stopped
it. The retry charged the member a month they had cancelled before it was charged, and the
notice then moved to the end of that month (`overtaken.notice_follows_paid_period`). Now a
notice in effect at or before the instant of the charge keeps the renewal out of the due scan
(`attempts.is_due`, `attempts.ends_before_renewal` at the charge's instant, the collector's
`_due_filter` and `next_due`); the period-end sweep ends the plan. A debt stays collectable
under a notice in effect (s41).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from dateutil.relativedelta import relativedelta
from sqlalchemy import select

from gymctl.billing import attempts, collector
from gymctl.models import CancellationSettlement, PaymentTransaction
from gymctl.models.billing import SubscriptionStatus
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.settlement import Doors, period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, TIMEOUT, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded  # the demo gym renews monthly card plans and takes notices

MINUTE = timedelta(minutes=1)
DUE = NOW - MINUTE  # the renewal date: the end of the period paid


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


def _catch_up(session_factory, sandbox, at) -> collector.Summary:
    return collector.catch_up(session_factory, sandbox.provider, now=at, cipher=TEST_CIPHER)


@pytest.mark.parametrize("late", ["technical_retry", "collection_resumed"])
def test_a_renewal_collected_late_is_not_charged_after_a_notice_in_effect(
    session, session_factory, gym, sandbox, mailer, late
):
    card = TIMEOUT if late == "technical_retry" else APPROVE
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, card)
    subscription = bf.make_subscription(
        session,
        gym,
        payment_method_id=method.id,
        now=DUE - relativedelta(months=1),
        collection_paused=late == "collection_resumed",
    )
    session.commit()
    if late == "technical_retry":
        # The renewal never reaches the provider; recovery confirms it: retried in 5 minutes.
        assert _catch_up(session_factory, sandbox, NOW).pending == 1
        recovered = NOW + attempts.EXECUTING_GRACE
        collector.recover(session_factory, sandbox.provider, now=recovered, cipher=TEST_CIPHER)
    else:
        assert _catch_up(session_factory, sandbox, NOW).blocked == 1  # the owner's pause
    given = NOW + 2 * MINUTE
    give_notice(session, gym, subscription, now=given)
    if late == "collection_resumed":
        subscription.collection_paused = False
    session.commit()
    session.expire_all()
    assert subscription.cancellation_effective_at == given  # the period read is over
    charge_at = subscription.retry_at or NOW + 3 * MINUTE
    assert charge_at > given
    charges_before = len(session.scalars(select(PaymentTransaction.id)).all())

    # The retry's (or the resumed pass's) instant: nothing is charged...
    assert _catch_up(session_factory, sandbox, charge_at).selected == 0
    assert len(session.scalars(select(PaymentTransaction.id)).all()) == charges_before
    # ...and the Python rule, the SQL scan and the forecast's due rule agree: nothing is due.
    session.expire_all()
    assert not attempts.is_due(subscription, charge_at)
    assert collector.due_in(session, gym.organization.id, now=charge_at) == []
    assert collector.next_due(session, after=given) is None

    # The period-end sweep ends the plan by its notice: nothing paid, nothing owed back.
    doors = Doors(
        provider=sandbox.provider,
        cipher=TEST_CIPHER,
        documents=LocalDocumentProvider(),
        mailer=mailer,
    )
    assert period_end_sweep(session_factory, doors, now=charge_at).cancelled == [
        str(subscription.id)
    ]
    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.ended_at == given
    assert subscription.current_period_end == DUE  # no month was granted
    assert session.scalar(select(CancellationSettlement)).amount_in_cents == 0


def test_the_due_rule_and_the_due_scan_agree_on_notices_and_debts(session, gym):
    """At one instant: a renewal under a notice in effect is not due; a debt under one is
    (it stays owed, s41); a renewal under a notice still to come is (the settlement prorates
    the period it paid)."""
    at = NOW + 10 * MINUTE
    start = DUE - relativedelta(months=1)

    def plan(effective, **fields):
        card = bf.make_card(session, gym, user=gym.member)
        return bf.make_subscription(
            session,
            gym,
            payment_method_id=card.id,
            now=start,
            retry_at=at,
            cancel_at_period_end=True,
            cancellation_effective_at=effective,
            **fields,
        )

    renewal_after_notice = plan(NOW)
    debt_after_notice = plan(NOW, in_debt_since=DUE)
    notice_to_come = plan(at + timedelta(days=3))
    session.commit()

    due = set(collector.due_in(session, gym.organization.id, now=at))
    subscriptions = (renewal_after_notice, debt_after_notice, notice_to_come)
    assert due == {s.id for s in subscriptions if attempts.is_due(s, at)}
    assert due == {debt_after_notice.id, notice_to_come.id}
