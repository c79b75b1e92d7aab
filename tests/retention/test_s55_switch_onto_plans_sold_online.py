"""s55 (a hunter's test): a presale's switch in its plan group (spec B 4.3, 7; 2.1
max_purchases "refuses further swaps or purchases"): a swap is a purchase of the target, so it
refuses what a purchase refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models import BillingSettings
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
)
from tests.billing.test_member_life import life  # noqa: F401 (fixture)
from tests.conftest import NOW

D = timedelta(days=1)

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize(
    "desk_plan",
    [
        {"name": "Founders cash", "type": "cash"},
        {"name": "Founders pack", "type": "pack", "validityDays": 30, "sessionsQuota": 10},
        # a card plan in a currency the card provider does not take (a purchase: 409
        # currency_not_supported)
        {"name": "Founders yen", "type": "card", "currency": "JPY", "intervalMonths": 1},
    ],
)
def test_a_presale_is_not_switched_onto_a_plan_it_could_not_be_sold_online(life, desk_plan):  # noqa: F811
    """Spec B 4.3: the member's plan change is offered for "a grouped scheduled presale" and
    "the change-plan target list holds only same-group plans"; a member's purchase of a plan
    that is not a card plan answers 409 plan_sold_at_desk (checkout._purchase_terms). A
    switch takes the target's place and price like a purchase (spec B 2.1), yet change_plan
    checks only the group: a card presale moves onto a cash plan or a pack, still collected
    by the card provider on the opening day (a desk-only plan charged online, a pack granted
    a calendar month instead of its validity days), or onto a card plan in a currency the card
    provider does not take. Now not offered, and refused as a purchase is, nothing changed."""
    opening = NOW + 10 * D
    life.session.add(BillingSettings(organization_id=life.org.id, opening_day=opening))
    life.session.commit()
    founders = create_plan(life.client, life.org, name="Founders", planGroup="founders")
    terms = {"planGroup": "founders", "priceInCents": 9000, "intervalMonths": None}
    other = create_plan(life.client, life.org, **{**terms, **desk_plan})
    life.at(NOW + D)
    sub_id = life.buy(founders)
    mine = f"/subscriptions/{sub_id}"

    targets = life.call("GET", f"{mine}/plan-change-targets", life.member, 200)["data"]
    assert other["id"] not in [plan["id"] for plan in targets]
    answer = life.client.post(
        f"/organizations/{life.org.id}{mine}/change-plan",
        json={"planId": other["id"]},
        headers=life.headers(life.member),
    )
    assert answer.status_code == 409, answer.json
    assert answer.json["code"] == (
        "currency_not_supported" if desk_plan["type"] == "card" else "plan_sold_at_desk"
    )
    kept = life.subscription(sub_id)
    assert (str(kept.plan_id), kept.price_in_cents) == (founders["id"], 25000)
    assert life.taken() == {"Founders": 1, desk_plan["name"]: 0}
