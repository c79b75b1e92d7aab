"""A debt attempt in flight when the member leaves (spec B 3, 7): removal ends the plan
(leaving.end_holdings -> attempts.end_plan), which clears its charge date; the debt stays owed.
The provider's approval that comes back afterwards paid that very debt: it is restored from
debt and the plan stays ended, not filed as retry_date_changed for staff to close by hand.
Real drift (another debt amount, a retry date staff moved) is still reviewed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access.memberships import remove_member
from gymctl.billing import attempts
from gymctl.models import OutboxEvent, PaymentTransaction, Subscription, Task
from gymctl.models.billing import AttemptKind, PlanType, SubscriptionStatus, TransactionStatus
from gymctl.models.organizations import MembershipStatus
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

DAY_0 = NOW - timedelta(days=2)
DUE = DAY_0 - timedelta(days=1)


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


def _in_debt(session, gym, sandbox) -> Subscription:
    """A card plan whose renewal was declined two days ago: in debt, its retry due now."""
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, APPROVE)
    subscription = bf.make_subscription(
        session,
        gym,
        PlanType.card,
        payment_method_id=method.id,
        in_debt_since=DAY_0,
        next_charge_date=DUE,
        current_period_end=DUE,
        current_period_start=DUE - timedelta(days=30),
        retry_at=NOW - timedelta(minutes=1),
    )
    session.commit()
    return subscription


def _sent_debt_attempt(session_factory, sandbox, subscription):
    """Step 1 stored and committed, step 2 answered: the answer not applied yet."""
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        assert began.outcome == "started", began
        worker.commit()
    result = attempts.send_attempt(began, sandbox.provider)
    return began, result


def _apply(session_factory, began, result, at):
    with session_factory() as worker:
        applied = attempts.apply_outcome(worker, began.transaction_id, result, now=at)
        worker.commit()
    return applied


def _removed(session_factory, gym, at):
    with session_factory() as staff:
        remove_member(
            staff,
            gym.organization.id,
            gym.member.id,
            actor=None,
            actor_user_id=gym.owner.id,
            now=at,
        )
        staff.commit()


def _follow_ups(session) -> list[Task]:
    return list(session.scalars(select(Task).where(Task.kind == "payment_follow_up")))


def test_a_debt_paid_after_the_member_was_removed_is_restored_and_the_plan_stays_ended(
    session, session_factory, gym, sandbox
):
    subscription = _in_debt(session, gym, sandbox)
    owed = subscription.debt_amount_in_cents
    began, result = _sent_debt_attempt(session_factory, sandbox, subscription)
    removed_at = NOW + timedelta(seconds=5)
    _removed(session_factory, gym, removed_at)
    session.expire_all()
    ended = session.get(Subscription, subscription.id)
    assert (ended.status, ended.cancellation_reason) == (
        SubscriptionStatus.cancelled,
        "membership_ended",
    )
    assert (ended.next_charge_date, ended.debt_amount_in_cents) == (None, owed)

    applied = _apply(session_factory, began, result, NOW + timedelta(seconds=10))

    assert (applied.outcome, applied.alert) == ("charged", None)
    session.expire_all()
    transaction = session.get(PaymentTransaction, began.transaction_id)
    assert transaction.attempt_kind == AttemptKind.debt
    assert transaction.status == TransactionStatus.completed
    assert transaction.amount_in_cents == owed
    assert "settlementReview" not in transaction.billing_attempt
    assert transaction.effects["done"] == ["ledger", "subscription", "membership"]
    row = session.get(Subscription, subscription.id)
    # Paid, not revived: the plan stays ended, nothing renews, the debt columns are restored.
    assert (row.status, row.cancellation_reason) == (
        SubscriptionStatus.cancelled,
        "membership_ended",
    )
    assert (row.debt_amount_in_cents, row.debt_since, row.debt_reason) == (0, None, None)
    assert (row.next_charge_date, row.retry_at, row.current_period_end) == (
        None,
        None,
        ended.current_period_end,
    )
    session.refresh(gym.membership)
    assert gym.membership.status == MembershipStatus.cancelled  # no settlement revives it
    assert _follow_ups(session) == []
    [renewed] = session.scalars(
        select(OutboxEvent.payload).where(
            OutboxEvent.name == "subscription.renewed",
            OutboxEvent.aggregate_id == str(subscription.id),
        )
    )
    assert (renewed["kind"], renewed["granted"]) == ("debt", False)


def test_a_debt_changed_on_an_ended_plan_while_in_flight_is_still_reviewed(
    session, session_factory, gym, sandbox
):
    """The plan ended and staff changed the debt meanwhile: not the debt the attempt paid."""
    subscription = _in_debt(session, gym, sandbox)
    began, result = _sent_debt_attempt(session_factory, sandbox, subscription)
    _removed(session_factory, gym, NOW + timedelta(seconds=5))
    with session_factory() as staff:
        staff.get(Subscription, subscription.id).debt_amount_in_cents = 5000
        staff.commit()

    applied = _apply(session_factory, began, result, NOW + timedelta(seconds=10))

    assert (applied.outcome, applied.alert) == ("charged", "settlement_review:debt_changed")
    session.expire_all()
    transaction = session.get(PaymentTransaction, began.transaction_id)
    assert transaction.billing_attempt["settlementReview"]["reason"] == "debt_changed"
    assert transaction.effects["done"] == ["ledger"]
    assert session.get(Subscription, subscription.id).debt_amount_in_cents == 5000
    assert len(_follow_ups(session)) == 1


def test_a_retry_date_moved_by_staff_on_a_live_plan_is_still_reviewed(
    session, session_factory, gym, sandbox
):
    subscription = _in_debt(session, gym, sandbox)
    began, result = _sent_debt_attempt(session_factory, sandbox, subscription)
    with session_factory() as staff:
        staff.get(Subscription, subscription.id).next_charge_date = NOW + timedelta(days=3)
        staff.commit()

    applied = _apply(session_factory, began, result, NOW + timedelta(seconds=10))

    assert (applied.outcome, applied.alert) == ("charged", "settlement_review:retry_date_changed")
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    assert (row.status, row.debt_amount_in_cents) == (SubscriptionStatus.debt, row.price_in_cents)
    assert len(_follow_ups(session)) == 1


def test_a_renewal_paid_after_the_member_was_removed_is_still_reviewed(
    session, session_factory, gym, sandbox
):
    """A renewal's attempt paid a period the ended plan no longer has: staff refund it."""
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, APPROVE)
    subscription = bf.make_subscription(
        session,
        gym,
        PlanType.card,
        payment_method_id=method.id,
        next_charge_date=NOW - timedelta(minutes=1),
        current_period_end=NOW - timedelta(minutes=1),
    )
    session.commit()
    began, result = _sent_debt_attempt(session_factory, sandbox, subscription)
    _removed(session_factory, gym, NOW + timedelta(seconds=5))

    applied = _apply(session_factory, began, result, NOW + timedelta(seconds=10))

    assert (applied.outcome, applied.alert) == ("charged", "settlement_review:retry_date_changed")
    session.expire_all()
    assert session.get(PaymentTransaction, began.transaction_id).attempt_kind == (
        AttemptKind.recurring
    )
    assert session.get(Subscription, subscription.id).status == SubscriptionStatus.cancelled
