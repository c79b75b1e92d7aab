"""A plan cancelled for non-payment keeps its debt columns, and they block booking; any payment
(the desk's clear-debt, the member's pay-debt) restores them whatever the status, and the block
lifts (spec B 3, 4.3, 7). So does a plan whose notice ended it in debt. Through the HTTP routes,
the period-end sweep and the booking eligibility."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.lifecycle import run_lifecycle
from gymctl.bookings import schedule
from gymctl.models import OutboxEvent, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.card_http import CHARGE
from gymctl.retention.settlement import period_end_sweep
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.cards import DECLINE
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import card_subscription
from tests.conftest import NOW
from tests.retention.conftest import doors, mailer  # noqa: F401 (fixtures)

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


def _me(client, gym, headers, subscription) -> dict:
    mine = client.get(
        f"/organizations/{gym.organization.id}/me/subscriptions", headers=headers(gym.member)
    )
    return next(row for row in mine.json["data"] if row["id"] == str(subscription.id))


def test_a_member_in_debt_gives_notice_and_the_plan_ends_now_owing_what_it_owed(
    client,
    session,
    session_factory,
    gym,
    card_server,
    class_session,
    headers,
    doors,  # noqa: F811
):
    """Notice is given "in any status" (spec B 3) and the app offers it to a plan in debt; its
    period end is behind it (the renewal was declined), so it takes effect now, where it was
    refused as notice_effective_in_past. The plan it ends still owes its debt, which blocks
    booking past its grace as it did in status debt (spec B 7), until the member pays it."""
    subscription = card_subscription(session, gym, card_server, in_debt_since=PAST_GRACE)
    session.commit()
    assert "give_notice" in _me(client, gym, headers, subscription)["memberActions"]

    given = client.post(_url(gym, subscription, "notice"), json={}, headers=headers(gym.member))

    assert given.status_code == 200, given.json
    session.expire_all()
    assert subscription.cancellation_effective_at == NOW
    period_end_sweep(session_factory, doors, now=NOW + timedelta(hours=1))
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    assert (row.status, row.cancellation_reason) == (SubscriptionStatus.cancelled, "notice")
    assert (row.debt_amount_in_cents, row.debt_since) == (row.price_in_cents, PAST_GRACE)
    blocked = _book(client, gym, class_session, headers)
    assert (blocked.status_code, blocked.json["code"]) == (409, "booking_blocked_debt")
    assert blocked.json["billingDebt"]["state"] == "past_grace"

    paid = client.post(_url(gym, subscription, "pay-debt"), headers=headers(gym.member))

    assert (paid.status_code, paid.json["data"]["outcome"]) == (200, "charged")
    assert _book(client, gym, class_session, headers).status_code == 201


def test_inside_its_grace_the_debt_of_a_plan_ended_by_notice_does_not_block(
    client, session, gym, card_server, class_session, headers
):
    subscription = card_subscription(session, gym, card_server, in_debt_since=NOW)
    subscription.status = SubscriptionStatus.cancelled
    subscription.cancellation_reason = "notice"
    session.commit()

    assert _book(client, gym, class_session, headers).status_code == 201


def test_debts_in_two_currencies_are_told_apart_not_added(
    client, session, gym, class_session, headers
):
    """A gym may sell plans in two currencies: 10000 ILS and 5000 USD owed were told as
    15000 ILS. amountInCents is the oldest debt's currency; byCurrency names each."""
    ils = bf.make_plan(session, gym.organization, PlanType.cash, price_in_cents=10000)
    usd = bf.make_plan(
        session, gym.organization, PlanType.cash, price_in_cents=5000, currency="USD"
    )
    bf.make_subscription(session, gym, plan=ils, in_debt_since=PAST_GRACE)
    bf.make_subscription(session, gym, plan=usd, in_debt_since=PAST_GRACE + timedelta(hours=1))
    session.commit()

    blocked = _book(client, gym, class_session, headers)

    assert blocked.status_code == 409
    debt = blocked.json["billingDebt"]
    assert (debt["amountInCents"], debt["currency"]) == (10000, ils.currency)
    assert debt["byCurrency"] == [
        {"currency": ils.currency, "amountInCents": 10000},
        {"currency": "USD", "amountInCents": 5000},
    ]
