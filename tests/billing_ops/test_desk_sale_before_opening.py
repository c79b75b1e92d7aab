"""A plan sold at the desk before the gym's opening day starts on that day (plans.grant_plan),
as a card buyer's presale is first charged then: a cash month sold three weeks before the gym
opened ran from the sale, and three of its four weeks were spent on a closed gym. The owner
moving the day moves the terms sold for it (org_settings._move_sold_for_the_day); a cash plan's
move later is recorded in its cashPauses as opening_delay, days the member paid for (spec B
2.1: "entries with reason opening_delay keep the refund basis")."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.bookings import book, schedule
from gymctl.clock import add_months
from gymctl.errors import DomainError
from gymctl.models import Role, Subscription
from gymctl.models.billing import PlanType
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.billing import factories as bf
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (the card provider's app)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym sells at the desk: both engines

D = timedelta(days=1)
OPENING = NOW + 20 * D


def _sell(client, gym, user_id, plan, headers=None, **body):  # noqa: F811
    return client.post(
        f"/organizations/{gym.id}/subscriptions",
        json={"userId": str(user_id), "planId": str(plan.id), **body},
        headers=headers or gym[Role.owner].headers,
    )


def _move_opening(client, gym, day):  # noqa: F811
    return client.patch(
        f"/organizations/{gym.id}/billing/settings",
        json={"openingDay": day.isoformat()},
        headers=gym[Role.owner].headers,
    )


@pytest.fixture
def opening_ahead(client, session, gym):  # noqa: F811
    assert _move_opening(client, gym, OPENING).status_code == 200
    return bf.make_plan(session, gym, PlanType.cash)


def _term(session, answer):
    assert answer.status_code == 201, answer.json
    session.expire_all()
    return session.get(Subscription, uuid.UUID(answer.json["data"]["id"]))


def test_a_cash_month_sold_before_the_opening_day_starts_on_it(
    client,
    session,
    gym,  # noqa: F811
    opening_ahead,
):
    member = gym[Role.member].user.id
    sold = _term(session, _sell(client, gym, member, opening_ahead))

    assert (sold.started_at, sold.current_period_start) == (OPENING, OPENING)
    assert sold.current_period_end == add_months(OPENING, 1, "UTC")
    assert sold.cash_prepaid_through == sold.current_period_end
    assert sold.cash_pauses == []


def test_moving_the_opening_day_moves_the_desk_terms_sold_for_it(
    client,
    session,
    gym,  # noqa: F811
    opening_ahead,
):
    cash = _term(session, _sell(client, gym, gym[Role.member].user.id, opening_ahead)).id
    pack = bf.make_plan(session, gym, PlanType.pack)
    later_due = (NOW + 40 * D).isoformat()
    unpaid = _sell(
        client, gym, gym[Role.coach].user.id, pack, method="pay_later", paymentDueAt=later_due
    )
    unpaid = _term(session, unpaid).id
    later = OPENING + 10 * D

    moved = _move_opening(client, gym, later)

    assert moved.status_code == 200, moved.json
    assert moved.json["data"]["deskTermsMoved"] == 2
    session.expire_all()
    cash, unpaid = session.get(Subscription, cash), session.get(Subscription, unpaid)
    assert (cash.current_period_start, cash.current_period_end) == (
        later,
        add_months(later, 1, "UTC"),
    )
    assert cash.cash_prepaid_through == cash.current_period_end
    assert cash.cash_pauses == [
        {"reason": "opening_delay", "from": OPENING.isoformat(), "until": later.isoformat()}
    ]
    assert unpaid.current_period_start == later
    assert unpaid.cash_pauses == []  # a pay-later pack pays no cash: no pause to record

    # Moved earlier again: the terms follow, and the cash plan's record stays (append-only).
    earlier = NOW + 5 * D
    assert _move_opening(client, gym, earlier).json["data"]["deskTermsMoved"] == 2
    session.expire_all()
    cash = session.get(Subscription, cash.id)
    assert cash.current_period_start == earlier
    assert len(cash.cash_pauses) == 1


def test_a_sale_once_the_gym_has_opened_starts_at_once(
    client,
    session,
    gym,  # noqa: F811
    opening_ahead,
    app,  # noqa: F811
    idp,
):
    opened = OPENING + D
    app.extensions["gymctl"].clock.set(opened)
    owner = {"Authorization": f"Bearer {idp.token('user_owner', now=opened)}"}
    sold = _term(session, _sell(client, gym, gym[Role.member].user.id, opening_ahead, owner))

    assert sold.current_period_start == OPENING + D


def test_a_term_not_begun_books_no_class_before_it_and_one_from_its_first_day(
    client,
    session,
    gym,  # noqa: F811
):
    """A pack sold for the opening day pays for the classes of its term: one before it (a
    soft-opening class) is refused as one past a plan's end is, and spends no session."""
    set_up = client.patch(
        f"/organizations/{gym.id}/billing/settings",
        json={"openingDay": OPENING.isoformat(), "planRequiredToBook": True},
        headers=gym[Role.owner].headers,
    )
    assert set_up.status_code == 200, set_up.json
    pack = bf.make_plan(session, gym, PlanType.pack, sessions_quota=5)
    session.commit()
    sold = _term(session, _sell(client, gym, gym[Role.member].user.id, pack))
    kind = schedule.create_class_type(
        session, gym.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    early = schedule.schedule_session(session, kind, starts_at=OPENING - D, now=NOW)
    first = schedule.schedule_session(session, kind, starts_at=OPENING, now=NOW)
    member = gym[Role.member].membership
    booked = {"actor_user_id": member.user_id, "now": NOW}

    with pytest.raises(DomainError) as refused:
        book.book(session, gym.id, early.id, member, **booked)
    seat = book.book(session, gym.id, first.id, member, **booked)

    assert refused.value.code == "plan_ends_before_session"
    assert (seat.subscription_id, sold.sessions_remaining) == (sold.id, 4)
