"""Plan change of a grouped scheduled presale (spec B 4.3, 7)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl import ids
from gymctl.billing import collector
from gymctl.models import PaymentTransaction, Plan
from gymctl.models.billing import AttemptKind, TransactionStatus, TransactionType
from gymctl.retention import plan_change
from tests.billing.cards import TIMEOUT, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER, make_plan, make_subscription
from tests.billing.passes import collect
from tests.conftest import NOW
from tests.retention.conftest import refused

OPENING = NOW + timedelta(days=10)


@pytest.fixture
def plans(session, gym):
    monthly = make_plan(session, gym.organization, name="Launch monthly", plan_group="launch",
                        purchases_count=1)  # fmt: skip
    yearly = make_plan(session, gym.organization, name="Launch yearly", plan_group="launch",
                       price_in_cents=99000, interval_months=12, max_purchases=1)  # fmt: skip
    return monthly, yearly


def _change(session, gym, subscription, plan, locale="en"):
    return plan_change.change_plan(
        session,
        gym.organization.id,
        subscription.id,
        plan.id,
        actor_user_id=gym.member.id,
        locale=locale,
        now=NOW,
    )


def test_a_swap_moves_the_plan_and_its_purchase_place(session, gym, plans):
    monthly, yearly = plans
    subscription = make_subscription(session, gym, plan=monthly, presale_opening=OPENING)
    _change(session, gym, subscription, yearly)
    assert (subscription.plan_id, subscription.price_in_cents, subscription.interval_months) == (
        yearly.id,
        99000,
        12,
    )
    assert subscription.next_charge_date == OPENING  # still charged on the opening day
    session.expire_all()
    assert (
        session.get(Plan, monthly.id).purchases_count,
        session.get(Plan, yearly.id).purchases_count,
    ) == (0, 1)


def test_a_pending_payment_refuses_plan_change_charge_in_flight(session, gym, plans):
    monthly, yearly = plans
    subscription = make_subscription(session, gym, plan=monthly, presale_opening=OPENING)
    session.add(
        PaymentTransaction(
            id=ids.new_id(),
            organization_id=gym.organization.id,
            subscription_id=subscription.id,
            user_id=gym.member.id,
            type=TransactionType.recurring,
            status=TransactionStatus.pending,
            provider="card_provider",
            amount_in_cents=9900,
            currency="ILS",
            attempt_kind=AttemptKind.recurring,
            metadata_={},
            created_at=NOW,
            updated_at=NOW,
        )
    )
    error = refused(session, lambda: _change(session, gym, subscription, yearly, "es"))
    assert (error.code, error.status) == ("plan_change_charge_in_flight", 409)
    assert error.message.startswith("Se está procesando")


def test_a_full_target_is_sold_out_and_the_same_plan_is_refused(session, gym, plans):
    monthly, yearly = plans
    yearly.purchases_count = 1  # its one place is taken
    subscription = make_subscription(session, gym, plan=monthly, presale_opening=OPENING)
    error = refused(session, lambda: _change(session, gym, subscription, yearly))
    assert (error.code, error.status) == ("plan_sold_out", 409)
    error = refused(session, lambda: _change(session, gym, subscription, monthly))
    assert (error.code, error.status) == ("plan_change_same_plan", 409)


def test_a_plan_the_member_already_holds_is_refused_and_not_offered(session, gym, plans):
    """Spec B 4.3: "Plan purchase refuses active and scheduled holders of a recurring plan with
    409 plan_already_held { status, subscriptionId }"; a presale's switch onto such a plan ran
    into the database's unique index instead (a 500 over HTTP) and was offered as a target."""
    monthly, yearly = plans
    held = make_subscription(session, gym, plan=yearly)  # active
    subscription = make_subscription(session, gym, plan=monthly, presale_opening=OPENING)
    assert plan_change.change_targets(session, subscription) == []
    error = refused(session, lambda: _change(session, gym, subscription, yearly))
    assert (error.code, error.status) == ("plan_already_held", 409)
    assert error.details == {"subscriptionId": str(held.id), "status": "active"}


def test_an_ungrouped_presale_cannot_swap_and_lists_no_targets(session, gym, plans):
    _, yearly = plans
    solo = make_plan(session, gym.organization, name="Solo")
    subscription = make_subscription(session, gym, plan=solo, presale_opening=OPENING)
    assert plan_change.change_targets(session, subscription) == []
    assert "change_plan" not in plan_change.member_actions(session, subscription)
    error = refused(session, lambda: _change(session, gym, subscription, yearly))
    assert (error.code, error.status) == ("presale_swap_requires_same_group", 409)


@pytest.mark.embedded
def test_a_presale_whose_opening_charge_awaits_its_technical_retry_cannot_swap(
    session, session_factory, gym, plans, tmp_path
):
    """A confirmed non-charge of the opening charge (a timeout the provider confirmed never
    charged) leaves the presale scheduled, its retry owed in minutes: that charge is still in
    flight. Swapped then, the retry met a new price and was blocked as retry_terms_changed,
    the member's own presale waiting on an owner."""
    monthly, yearly = plans
    sandbox = Sandbox(tmp_path)
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, TIMEOUT)
    due = NOW - timedelta(minutes=1)
    subscription = make_subscription(
        session, gym, plan=monthly, presale_opening=due, payment_method_id=method.id
    )
    session.commit()
    assert collect(session_factory, subscription, sandbox.provider, NOW) == "pending"
    later = NOW + timedelta(minutes=2)
    collector.recover(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    session.expire_all()
    assert subscription.status.value == "scheduled"
    assert subscription.retry_at is not None
    error = refused(
        session,
        lambda: plan_change.change_plan(
            session,
            gym.organization.id,
            subscription.id,
            yearly.id,
            actor_user_id=gym.member.id,
            locale="en",
            now=later,
        ),
    )
    assert (error.code, error.status) == ("plan_change_charge_in_flight", 409)
    session.rollback()
    retried = collect(session_factory, subscription, sandbox.provider, subscription.retry_at)
    assert retried == "pending"  # sent under its own terms (the timeout card again), not blocked
