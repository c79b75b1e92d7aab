"""A staff notice on a plan sold at the desk before the gym's opening day (its term starts on
that day, plans.grant_plan) settles the days of the term only: counted from the notice's date,
the days before the gym opened were refunded too, days no one paid for (spec B 8's proration:
"days from effective date to period end", of a paid period)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from gymctl.billing import plans
from gymctl.models import CancellationSettlement
from gymctl.models.billing import CollectionMethod, PlanType
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.proration import prorated_refund, refund_days
from gymctl.retention.settlement import period_end_sweep
from tests.billing.factories import make_plan
from tests.conftest import NOW
from tests.retention.conftest import staff_notice

D = timedelta(days=1)


def test_a_notice_before_the_term_begins_refunds_the_term_not_the_days_before_it(
    session, session_factory, gym, doors
):
    opening = NOW + 20 * D
    plan = make_plan(session, gym.organization, PlanType.cash, price_in_cents=36500)
    sold = plans.grant_plan(
        session, plan, gym.membership, method=CollectionMethod.cash, now=NOW,
        actor_user_id=gym.owner.id, documents=LocalDocumentProvider(), opening_day=opening,
    )  # fmt: skip
    session.commit()
    effective = NOW + D
    staff_notice(session, gym, sold, effective)
    session.commit()

    period_end_sweep(session_factory, doors, now=effective)

    settlement = session.scalar(
        select(CancellationSettlement).where(CancellationSettlement.subscription_id == sold.id)
    )
    term = refund_days(opening, sold.current_period_end, [])
    assert term < refund_days(effective, sold.current_period_end, [])
    assert (settlement.days, settlement.amount_in_cents) == (term, prorated_refund(36500, term))
