"""A plan cancelled for non-payment keeps its debt columns, and they block booking; any payment
(the desk's clear-debt, the member's pay-debt) restores them whatever the status, and the block
lifts (spec B 3, 4.3, 7). Through the HTTP routes and the booking eligibility."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.lifecycle import run_lifecycle
from gymctl.bookings import schedule
from gymctl.models import OutboxEvent, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.card_http import CHARGE
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.cards import DECLINE
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import card_subscription
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the pay-debt route hands over its session (webhooks.context)

PAST_GRACE = NOW - timedelta(days=8)  # the default grace is 7 days


@pytest.fixture
def headers(idp):
    def of(user) -> dict[str, str]:
        return {"Authorization": f"Bearer {idp.token(user.identity_id, now=NOW)}"}

    return of


@pytest.fixture
def class_session(session, gym):
    kind = schedule.create_class_type(
        session,
        gym.organization.id,
        name="Strength 101",
        default_capacity=5,
        duration_minutes=60,
        now=NOW,
    )
    return schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=1), now=NOW)


def _cancelled_for_non_payment(session, subscription) -> Subscription:
    run_lifecycle(session, now=NOW)
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.cancellation_reason == "non_payment"
    assert subscription.debt_amount_in_cents > 0
    session.commit()
    return subscription


def _book(client, gym, class_session, headers):
    return client.post(
        f"/organizations/{gym.organization.id}/sessions/{class_session.id}/book",
        json={},
        headers=headers(gym.member),
    )


def _url(gym, subscription, action: str) -> str:
    return f"/organizations/{gym.organization.id}/subscriptions/{subscription.id}/{action}"


def test_desk_clears_the_debt_of_a_plan_cancelled_for_non_payment_and_booking_lifts(
    client, session, gym, class_session, headers
):
    """ "a payment (desk payment, clear-debt, member pay-debt ...) -> debt columns restored";
    the plan stays cancelled: paying what it owed does not revive it."""
    subscription = bf.make_subscription(session, gym, PlanType.cash, in_debt_since=PAST_GRACE)
    _cancelled_for_non_payment(session, subscription)
    blocked = _book(client, gym, class_session, headers)
    assert (blocked.status_code, blocked.json["code"]) == (409, "booking_blocked_debt")
    assert blocked.json["billingDebt"]["state"] == "cancelled"

    cleared = client.post(
        _url(gym, subscription, "clear-debt"), json={}, headers=headers(gym.owner)
    )

    assert cleared.status_code == 200, cleared.json
    assert cleared.json["data"]["transaction"]["amountInCents"] == subscription.price_in_cents
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    assert (row.status, row.cancellation_reason) == (SubscriptionStatus.cancelled, "non_payment")
    assert (row.debt_amount_in_cents, row.debt_since, row.debt_reason) == (0, None, None)
    booked = _book(client, gym, class_session, headers)
    assert booked.status_code == 201, booked.json
    before = snapshot(session)
    again = client.post(_url(gym, subscription, "clear-debt"), json={}, headers=headers(gym.owner))
    assert (again.status_code, again.json["code"]) == (409, "subscription_not_in_debt")
    assert snapshot(session) == before


def test_member_pays_the_card_debt_of_a_plan_cancelled_for_non_payment_and_books_again(
    client, session, gym, card_server, class_session, headers
):
    subscription = card_subscription(session, gym, card_server, in_debt_since=PAST_GRACE)
    _cancelled_for_non_payment(session, subscription)
    assert _book(client, gym, class_session, headers).status_code == 409

    paid = client.post(_url(gym, subscription, "pay-debt"), headers=headers(gym.member))

    assert (paid.status_code, paid.json["data"]["outcome"]) == (200, "charged")
    assert card_server.requests(CHARGE) == 1
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    assert row.status == SubscriptionStatus.cancelled
    assert (row.debt_amount_in_cents, row.debt_since) == (0, None)
    # The payment is recorded as one, but no period is given to a plan that stays ended.
    [renewed] = session.scalars(
        select(OutboxEvent.payload).where(
            OutboxEvent.name == "subscription.renewed",
            OutboxEvent.aggregate_id == str(subscription.id),
        )
    )
    assert (renewed["kind"], renewed["granted"]) == ("debt", False)
    assert _book(client, gym, class_session, headers).status_code == 201
    before = snapshot(session)
    again = client.post(_url(gym, subscription, "pay-debt"), headers=headers(gym.member))
    assert (again.status_code, again.json["code"]) == (409, "pay_debt_not_available")
    assert card_server.requests(CHARGE) == 1
    assert snapshot(session) == before


def test_a_declined_debt_payment_leaves_a_cancelled_plan_cancelled_and_owing(
    client, session, gym, card_server, class_session, headers
):
    subscription = card_subscription(session, gym, card_server, DECLINE, in_debt_since=PAST_GRACE)
    _cancelled_for_non_payment(session, subscription)
    owed = subscription.debt_amount_in_cents

    paid = client.post(_url(gym, subscription, "pay-debt"), headers=headers(gym.member))

    assert (paid.status_code, paid.json["data"]["outcome"]) == (200, "declined")
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    assert (row.status, row.debt_amount_in_cents) == (SubscriptionStatus.cancelled, owed)
    assert row.debt_since == PAST_GRACE
    assert _book(client, gym, class_session, headers).json["code"] == "booking_blocked_debt"
