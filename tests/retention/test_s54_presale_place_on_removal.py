"""A plan never paid gives its max_purchases place back whichever way it ends (spec B 2.1:
"max_purchases caps purchases (a full cap refuses further swaps or purchases with a sold-out
answer)"; `plans.release_purchase_slot`: it caps sales, not pages opened). A hunt in s54 found
that withdrawing a presale gave its place back but removing or erasing its member did not: the
ended presale kept the place and the plan refused every other buyer as sold out. A plan the
member paid for keeps its place: that sale happened."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.access.erasure import erase_personal_data
from gymctl.access.memberships import remove_member
from gymctl.models import Plan, Subscription
from gymctl.models.billing import SubscriptionStatus
from tests.billing import factories as bf
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _leave(session, gym, how) -> None:
    if how == "removed":
        remove_member(
            session, gym.organization.id, gym.member.id, actor=None, actor_user_id=gym.owner.id,
            now=NOW,
        )  # fmt: skip
    else:
        erase_personal_data(
            session, gym.organization, gym.member.id, actor_user_id=gym.owner.id, now=NOW
        )
    session.commit()


@pytest.mark.parametrize("how", ["removed", "erased"])
def test_a_presale_ended_with_its_membership_gives_its_place_back(session, gym, how):
    plan = bf.make_plan(session, gym.organization, max_purchases=1, purchases_count=1)
    presale = bf.make_subscription(
        session, gym, plan=plan, presale_opening=NOW + timedelta(days=20)
    )
    session.commit()

    _leave(session, gym, how)

    session.expire_all()
    assert session.get(Subscription, presale.id).status is SubscriptionStatus.cancelled
    assert session.get(Plan, plan.id).purchases_count == 0


def test_a_paid_plan_ended_with_its_membership_keeps_its_place(session, gym):
    plan = bf.make_plan(session, gym.organization, max_purchases=1, purchases_count=1)
    paid = bf.make_subscription(session, gym, plan=plan)  # active
    session.commit()

    _leave(session, gym, "removed")

    session.expire_all()
    assert session.get(Subscription, paid.id).status is SubscriptionStatus.cancelled
    assert session.get(Plan, plan.id).purchases_count == 1
