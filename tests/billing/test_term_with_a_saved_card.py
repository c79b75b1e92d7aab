"""A card plan's term ends however it was paid, a saved card or not (spec B 3, term_ended).

The collector renews a card plan while a renewal is left (`grant_period`: none from
`renewal_end` on, none without an interval). A plan with a saved card whose last paid period
was over was then neither charged nor ended: `term_ended` read only rows with no card, so it
stayed active for ever and its member kept access without paying. Run here through the real
passes on a clock (the daily collector sweep at 02:00, the hourly lifecycle), every way a card
plan is paid: by the card provider with and without a saved card, in cash, on pay-later terms.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import plans
from gymctl.billing.lifecycle import ENDED
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import CollectionMethod, SubscriptionStatus, TransactionType
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing import factories as bf
from tests.billing.cards import Sandbox, save_test_card
from tests.billing.passes import MONTH, START, TICK, run_passes
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym sells card plans with a saved card


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


def _renewals(session, subscription) -> int:
    return session.scalar(
        select(func.count())
        .select_from(PaymentTransaction)
        .where(
            PaymentTransaction.subscription_id == subscription.id,
            PaymentTransaction.type == TransactionType.recurring,
        )
    )


def _card_plan(session, gym, sandbox, *, card: bool, **plan_fields) -> Subscription:
    plan = bf.make_plan(session, gym.organization, **plan_fields)
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator) if card else None
    return bf.make_subscription(
        session,
        gym,
        plan=plan,
        now=START,
        payment_method_id=method.id if method else None,
    )


@pytest.mark.parametrize("card", [True, False], ids=["saved_card", "no_card"])
def test_a_card_plan_with_a_last_renewal_ends_after_its_last_paid_period(
    session, session_factory, gym, card, tmp_path
):
    """Two paid months (bought, then one renewal before `renewal_end`): with a saved card the
    collector charges the one renewal and no more, and the pass ends the plan at the end of
    its last period; without a card nothing is charged and it ends at its renewal end (the
    later of the two, as before)."""
    sandbox = Sandbox(tmp_path)
    subscription = _card_plan(session, gym, sandbox, card=card)
    subscription.renewal_end = START + 2 * MONTH
    session.commit()

    run_passes(session, session_factory, sandbox, until=START + 2 * MONTH - TICK)
    assert subscription.status == SubscriptionStatus.active
    run_passes(session, session_factory, sandbox, until=START + 4 * MONTH)

    assert subscription.status == SubscriptionStatus.term_ended
    assert subscription.ended_at == START + 2 * MONTH
    assert _renewals(session, subscription) == (1 if card else 0)
    assert subscription.current_period_end == START + (2 * MONTH if card else MONTH)


def test_a_one_term_card_plan_with_a_saved_card_ends_at_its_period_end(
    session, session_factory, gym, tmp_path
):
    """No interval: the sale pays one term and the collector has no renewal to take."""
    sandbox = Sandbox(tmp_path)
    subscription = _card_plan(session, gym, sandbox, card=True, interval_months=None)
    ends = subscription.current_period_end
    assert subscription.next_charge_date is None
    session.commit()

    run_passes(session, session_factory, sandbox, until=ends + 2 * MONTH)

    assert (subscription.status, subscription.ended_at) == (SubscriptionStatus.term_ended, ends)
    assert _renewals(session, subscription) == 0


def test_an_open_ended_card_plan_with_a_saved_card_renews_and_stays(
    session, session_factory, gym, tmp_path
):
    """The rule does not reach a plan the collector renews: charged each month, active."""
    sandbox = Sandbox(tmp_path)
    subscription = _card_plan(session, gym, sandbox, card=True)
    session.commit()

    run_passes(session, session_factory, sandbox, until=START + 3 * MONTH + timedelta(days=1))

    assert subscription.status == SubscriptionStatus.active
    assert _renewals(session, subscription) == 3
    assert subscription.current_period_end == START + 4 * MONTH


@pytest.mark.parametrize("method", [CollectionMethod.cash, CollectionMethod.pay_later])
def test_a_card_plan_with_a_last_renewal_paid_at_the_desk_ends(
    session, session_factory, gym, method, tmp_path
):
    """In cash, its paid-through day with no renewal left; on pay-later terms, once paid."""
    sandbox = Sandbox(tmp_path)
    plan = bf.make_plan(session, gym.organization)
    subscription = plans.grant_plan(
        session,
        plan,
        gym.membership,
        method=method,
        documents=LocalDocumentProvider(),
        now=START,
        actor_user_id=gym.owner.id,
        payment_due_at=START + timedelta(days=7) if method == CollectionMethod.pay_later else None,
    )
    subscription.renewal_end = subscription.current_period_end
    subscription.unpaid_amount_in_cents = 0  # paid at the desk
    session.commit()

    run_passes(session, session_factory, sandbox, until=START + 3 * MONTH)

    assert subscription.status in ENDED
    assert (subscription.status, subscription.ended_at) == (
        SubscriptionStatus.term_ended,
        START + MONTH,
    )
    assert _renewals(session, subscription) == 0
