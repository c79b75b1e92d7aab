"""A course past its validity expires, as a pack or drop-in does (spec B 3 names the course
type but gives no row of its own). No lifecycle step selected a course: one sold with a
validity stayed active for ever past its last day, its member booking without a plan."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import plans
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models.billing import CollectionMethod, PlanType, SubscriptionStatus
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing.factories import make_plan
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

SECOND = timedelta(seconds=1)


def test_a_course_sold_at_the_desk_expires_at_its_validity_end(session, gym):
    course = make_plan(session, gym.organization, PlanType.course)
    subscription = plans.grant_plan(
        session,
        course,
        gym.membership,
        method=CollectionMethod.cash,
        documents=LocalDocumentProvider(),
        now=NOW,
        actor_user_id=gym.owner.id,
    )
    ends = subscription.current_period_end
    assert ends == NOW + timedelta(days=course.validity_days)

    assert run_lifecycle(session, now=ends - SECOND)["expired"] == 0
    summary = run_lifecycle(session, now=ends)

    assert (summary["expired"], summary["cash_lapsed"]) == (1, 0)
    assert (subscription.status, subscription.ended_at) == (SubscriptionStatus.expired, ends)
    assert subscription.debt_amount_in_cents == 0
