"""s55 (a hunter's test): an open page whose read-back never succeeds (spec B 3: "scheduled |
checkout page abandoned sweep | -> cancelled"; B 2.1 max_purchases; B 4.3 plan_already_held)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import checkout
from gymctl.models.billing import SubscriptionStatus
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
)
from tests.billing.test_member_life import life  # noqa: F401 (fixture)
from tests.conftest import NOW

GET_PAGE = "LowProfile/GetLpResult"
D = timedelta(days=1)

pytestmark = pytest.mark.embedded


def test_a_page_the_provider_never_answers_for_is_abandoned_in_the_end(life):  # noqa: F811
    """Spec B 3: a scheduled purchase whose page is abandoned is cancelled by the abandoned
    sweep (its max_purchases place given back, spec B 2.1). The sweep reads the page back
    first and, when the read-back fails (checkout.abandoned_sweep: provider_unreachable,
    which includes every ProviderRefused answer of a terminal that refuses for good, e.g. a
    merchant account since closed), commits and moves on with the page left open - with no
    bound. The abandoned read-back pass bounds its reads of such a terminal (31); the open
    sweep never gives up: the plan stays scheduled for ever, its place is held, and the
    member is answered plan_already_held on every new purchase. Now, 8 days after the page's
    time (checkout.UNANSWERED_FOR) the page is abandoned unread, its place given back."""
    plan = create_plan(life.client, life.org, maxPurchases=1)
    bought = life.call("POST", f"/plans/{plan['id']}/purchase", life.member, 201, json={})
    sub_id = bought["data"]["subscription"]["id"]
    life.card_server.inject(GET_PAGE, Fault.error, times=None, status=502)

    expired = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    for at in (expired, expired + D, expired + 9 * D, expired + 30 * D):
        checkout.abandoned_sweep(
            life.factory, life.card_server.provider(), now=at, cipher=TEST_CIPHER
        )

    assert life.subscription(sub_id).status is SubscriptionStatus.cancelled
    assert life.taken() == {"Monthly": 0}
