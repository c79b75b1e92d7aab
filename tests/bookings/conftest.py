"""A gym (the root fixture's) with a class type and a session tomorrow morning; helpers to add
members, book them and let them cancel, in the domain or through the API."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.bookings import book, schedule
from gymctl.models import Booking, Membership, Role, Subscription
from gymctl.models.billing import PlanType
from tests import factories
from tests.billing.factories import make_card, make_subscription
from tests.conftest import NOW

TOMORROW = NOW + timedelta(days=1)


def add_member(session, organization) -> Membership:
    user = factories.user(session)
    return factories.membership(session, user=user, organization=organization, role=Role.member)


def renewing_card_plan(session, gym, **fields) -> Subscription:
    """A monthly card plan renewing on the member's saved card. One with no card renews on
    nothing: the lifecycle ends it at its period end (spec B 3), so it books no class after it
    (quota.covered_until)."""
    card = make_card(session, gym)
    return make_subscription(session, gym, PlanType.card, payment_method_id=card.id, **fields)


def book_seat(session, gym, class_session, member: Membership | None = None, at=NOW) -> Booking:
    """The member (the gym's own by default) books themselves."""
    member = member or gym.membership
    return book.book(
        session,
        gym.organization.id,
        class_session.id,
        member,
        actor_user_id=member.user_id,
        now=at,
    )


def cancel_own(session, gym, booking: Booking, at=NOW) -> Booking:
    """The member cancels their own booking."""
    return book.cancel(
        session,
        gym.organization.id,
        booking.id,
        actor_user_id=booking.user_id,
        by_staff=False,
        now=at,
    )


def schedule_over_http(client, gym, *, capacity=1, starts_at=TOMORROW, name="Strength 101"):
    """A class type and one session of it, made by the gym's coach through the API (the access
    tests' gym): the session's JSON."""
    coach = gym[Role.coach].headers
    kind = client.post(
        f"/organizations/{gym.id}/class-types",
        json={"name": name, "defaultCapacity": capacity, "durationMinutes": 45},
        headers=coach,
    )
    assert kind.status_code == 201, kind.json
    row = client.post(
        f"/organizations/{gym.id}/sessions",
        json={"classTypeId": kind.json["data"]["id"], "startsAt": starts_at.isoformat()},
        headers=coach,
    )
    assert row.status_code == 201, row.json
    return row.json["data"]


def book_over_http(client, gym, session_id, role) -> dict:
    """The person of `role` books themselves through the API: the booking's JSON."""
    answer = client.post(
        f"/organizations/{gym.id}/sessions/{session_id}/book", json={}, headers=gym[role].headers
    )
    assert answer.status_code == 201, answer.json
    return answer.json["data"]


@pytest.fixture
def class_type(session, gym):
    return schedule.create_class_type(
        session,
        gym.organization.id,
        name="Strength 101",
        default_capacity=2,
        duration_minutes=60,
        now=NOW,
    )


@pytest.fixture
def class_session(session, class_type):
    return schedule.schedule_session(session, class_type, starts_at=TOMORROW, now=NOW)
