"""A pay-later balance paid at the desk before it is due (s54 noticed it, left it; a hunter's
test of s55). Spec B 3: only a "pay-later term past payment_due_at" becomes a debt, so the
balance is payable up to that instant; clear-debt answered 409 subscription_not_in_debt until
the lifecycle had opened the debt, with its notice and booking grace, and a member who came
to pay on time could not."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models.billing import SubscriptionStatus
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
)
from tests.billing.test_member_life import life  # noqa: F401 (fixture)
from tests.conftest import NOW

D = timedelta(days=1)

pytestmark = pytest.mark.embedded  # the demo gym sells on pay-later terms at the desk


def test_a_pay_later_balance_is_paid_at_the_desk_before_it_is_due(life):  # noqa: F811
    life.at(NOW)
    plan = create_plan(life.client, life.org, type="cash", priceInCents=8000)
    sale = {
        "userId": str(life.member.user.id),
        "planId": plan["id"],
        "method": "pay_later",
        "paymentDueAt": (NOW + 10 * D).isoformat(),
    }
    sold = life.call("POST", "/subscriptions", life.owner, 201, json=sale)["data"]
    assert sold["unpaidAmountInCents"] == 8000
    subscription_id = sold["id"]

    life.at(NOW + 2 * D)  # eight days early
    paid = life.call(
        "POST", f"/subscriptions/{subscription_id}/clear-debt", life.owner, 200, json={}
    )["data"]
    assert paid["transaction"]["amountInCents"] == 8000
    assert life.subscription(subscription_id).unpaid_amount_in_cents == 0
    assert life.ledger(subscription_id) == [("charge", "completed", 8000)]
    again = life.call(
        "POST", f"/subscriptions/{subscription_id}/clear-debt", life.owner, 409, json={}
    )
    assert again["code"] == "subscription_not_in_debt"  # paid once
    life.at(NOW + 11 * D)  # past the due instant nothing is owed: no debt opens
    assert life.lifecycle()["payment_due"] == 0
    assert life.subscription(subscription_id).status is SubscriptionStatus.active
    assert life.ledger(subscription_id) == [("charge", "completed", 8000)]
