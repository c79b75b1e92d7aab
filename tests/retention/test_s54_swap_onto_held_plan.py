"""A presale switched over HTTP onto a recurring plan the member already holds answers 409
plan_already_held and changes nothing (spec B 4.3); a hunt in s54 found a 500 (the database's
uq_subscriptions_plan_held), and the targets route offering that plan."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models import Role
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.conftest import NOW
from tests.retention.test_api import app  # noqa: F401 (fixture)

pytestmark = pytest.mark.embedded  # the member's own routes: both engines

gym = access.gym


def test_a_presale_switched_onto_a_plan_already_held_is_a_409(client, session, gym):
    founders = bf.make_plan(session, gym.organization, name="Founders", plan_group="launch")
    monthly = bf.make_plan(session, gym.organization, name="Monthly", plan_group="launch")
    held = bf.make_subscription(session, gym, plan=monthly)
    presale = bf.make_subscription(
        session, gym, plan=founders, presale_opening=NOW + timedelta(days=10)
    )
    session.commit()
    before = snapshot(session)
    member = gym[Role.member].headers
    route = f"/organizations/{gym.id}/subscriptions/{presale.id}"

    targets = client.get(f"{route}/plan-change-targets", headers=member)
    answer = client.post(f"{route}/change-plan", json={"planId": str(monthly.id)}, headers=member)

    assert targets.status_code == 200, targets.json
    assert targets.json["data"] == []
    assert (answer.status_code, answer.json["code"]) == (409, "plan_already_held")
    assert answer.json["subscriptionId"] == str(held.id)
    assert snapshot(session) == before
