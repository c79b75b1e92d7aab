"""A membership that ended takes no desk charge (gymctl.billing.desk.refuse_if_ended): a member
removed or erased kept their saved card on the money record, and the desk could charge it any
amount. A desk charge is tied to no subscription and restores no debt, so the debt the ended
plan kept is paid where paying restores it (clear-debt); the refusal names it. Nor is a plan
sold to them at the desk. Refusals write nothing and reach no provider; live members are
charged and sold to as before. Through the HTTP routes."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.access.erasure import erase_personal_data
from gymctl.access.memberships import remove_member
from gymctl.models import Membership, MembershipStatus, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.card_http import CHARGE
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import card_subscription
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the desk route hands over its session (webhooks.context)

DAY_0 = NOW - timedelta(days=3)


@pytest.fixture
def headers(idp):
    def of(user) -> dict[str, str]:
        return {"Authorization": f"Bearer {idp.token(user.identity_id, now=NOW)}"}

    return of


def _charge(client, gym, headers, amount, key=None):
    return client.post(
        f"/organizations/{gym.organization.id}/payments/desk-charges",
        json={
            "idempotencyKey": str(key or uuid.uuid4()),
            "userId": str(gym.member.id),
            "amountInCents": amount,
            "currency": "ILS",
            "description": "what the member owes",
        },
        headers=headers(gym.owner),
    )


def _leave(session, gym, how):
    if how == "removed":
        remove_member(
            session,
            gym.organization.id,
            gym.member.id,
            actor=None,
            actor_user_id=gym.owner.id,
            now=NOW,
        )
    else:
        erase_personal_data(
            session, gym.organization, gym.member.id, actor_user_id=gym.owner.id, now=NOW
        )
    session.commit()


@pytest.mark.parametrize("how", ["removed", "erased"])
def test_an_ended_membership_is_refused_any_desk_charge_and_its_debt_stays_collectable(
    client, session, gym, card_server, headers, how
):
    subscription = card_subscription(session, gym, card_server, in_debt_since=DAY_0)
    session.commit()
    owed = subscription.debt_amount_in_cents
    _leave(session, gym, how)
    session.expire_all()
    assert session.get(Membership, gym.membership.id).status == MembershipStatus.cancelled
    ended = session.get(Subscription, subscription.id)
    assert (ended.status, ended.debt_amount_in_cents) == (SubscriptionStatus.cancelled, owed)
    before = snapshot(session)

    # Neither another amount nor the debt's own: a desk charge would not restore the debt.
    for amount in (owed * 10, owed, 100):
        refused = _charge(client, gym, headers, amount)
        assert (refused.status_code, refused.json["code"]) == (409, "member_not_active")
        assert refused.json["debts"] == [
            {"subscriptionId": str(subscription.id), "amountInCents": owed, "currency": "ILS"}
        ]
    assert snapshot(session) == before
    assert card_server.requests(CHARGE) == 0

    cleared = client.post(
        f"/organizations/{gym.organization.id}/subscriptions/{subscription.id}/clear-debt",
        json={},
        headers=headers(gym.owner),
    )
    assert cleared.status_code == 200, cleared.json
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    assert (row.status, row.debt_amount_in_cents, row.debt_since) == (
        SubscriptionStatus.cancelled,
        0,
        None,
    )


def test_a_removed_member_owing_nothing_is_refused_with_no_debts(
    client, session, gym, card_server, headers
):
    card_subscription(session, gym, card_server)
    session.commit()
    _leave(session, gym, "removed")
    before = snapshot(session)

    refused = _charge(client, gym, headers, 4500)

    assert (refused.status_code, refused.json["code"], refused.json["debts"]) == (
        409,
        "member_not_active",
        [],
    )
    assert snapshot(session) == before
    assert card_server.requests(CHARGE) == 0


def test_a_charge_taken_before_the_removal_still_replays_its_outcome(
    client, session, gym, card_server, headers
):
    card_subscription(session, gym, card_server)
    session.commit()
    key = uuid.uuid4()
    first = _charge(client, gym, headers, 4500, key)
    assert (first.status_code, first.json["data"]["outcome"]) == (201, "charged")
    _leave(session, gym, "removed")

    again = _charge(client, gym, headers, 4500, key)

    assert (again.status_code, again.json["data"]["replayed"]) == (200, True)
    assert again.json["data"]["transaction"] == first.json["data"]["transaction"]
    assert card_server.requests(CHARGE) == 1


@pytest.mark.parametrize("status", [MembershipStatus.active, MembershipStatus.suspended])
def test_a_live_membership_in_debt_is_charged_at_the_desk_as_before(
    client, session, gym, card_server, headers, status
):
    card_subscription(session, gym, card_server, in_debt_since=DAY_0)
    gym.membership.status = status
    session.commit()

    charged = _charge(client, gym, headers, 4500)

    assert (charged.status_code, charged.json["data"]["outcome"]) == (201, "charged")
    assert card_server.requests(CHARGE) == 1


@pytest.mark.parametrize("method", ["cash", "pay_later"])
@pytest.mark.parametrize("how", ["removed", "erased"])
def test_an_ended_membership_is_sold_no_plan_at_the_desk(
    client, session, gym, headers, how, method
):
    """s54 (a hunt found it): the desk sale read the membership whatever its status, so staff
    sold a removed member a plan: an active subscription and a cash payment on an ended
    membership, or a pay-later balance that later opened a debt on someone gone."""
    plan = bf.make_plan(session, gym.organization, PlanType.cash)
    session.commit()
    _leave(session, gym, how)
    before = snapshot(session)
    body = {"userId": str(gym.member.id), "planId": str(plan.id), "method": method}
    if method == "pay_later":
        body["paymentDueAt"] = (NOW + timedelta(days=7)).isoformat()

    refused = client.post(
        f"/organizations/{gym.organization.id}/subscriptions", json=body, headers=headers(gym.owner)
    )

    assert (refused.status_code, refused.json["code"]) == (409, "member_not_active")
    assert snapshot(session) == before


def test_a_suspended_member_is_still_sold_a_plan_at_the_desk(client, session, gym, headers):
    plan = bf.make_plan(session, gym.organization, PlanType.cash)
    gym.membership.status = MembershipStatus.suspended
    session.commit()

    sold = client.post(
        f"/organizations/{gym.organization.id}/subscriptions",
        json={"userId": str(gym.member.id), "planId": str(plan.id), "method": "cash"},
        headers=headers(gym.owner),
    )

    assert sold.status_code == 201, sold.json
    assert sold.json["data"]["status"] == "active"
