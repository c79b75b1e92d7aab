"""Reviving a booking that still holds its pack's session (spec B 3: booking again revives the
row; bookings.quota: a session comes back once, when the booking stops recording the plan).

A seat staff cancelled or removed after its check-in keeps its session spent and still records
the plan; booked again, the session it holds is given back before a new one is spent, so a
pack at 0 sessions left does not refuse it. A booking cancelled before the class gave its
session back already: booked again on a pack at 0, it is refused plan_sessions_used_up."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.bookings import attendance
from gymctl.models import Role
from gymctl.models.billing import PlanType
from gymctl.models.bookings import CheckinMethod
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import TOMORROW, schedule_over_http

pytestmark = pytest.mark.embedded

gym = access.gym
DOOR = TOMORROW - timedelta(minutes=30)


@pytest.fixture
def setup(client, session, gym):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    pack = make_subscription(
        session, gym, PlanType.pack, membership=gym[Role.member].membership, sessions_remaining=1
    )
    session.commit()
    return pack, schedule_over_http(client, gym, capacity=5)


def _as(idp, role, at):
    """A fresh token of the person of `role` at `at` (tokens live 60 s)."""
    return {"Authorization": f"Bearer {idp.token(f'user_{role.value}', now=at)}"}


def _book(client, gym, row, headers=None):
    return client.post(
        f"/organizations/{gym.id}/sessions/{row['id']}/book",
        json={},
        headers=headers or gym[Role.member].headers,
    )


@pytest.mark.parametrize("how", ["cancel", "remove"])
def test_a_revived_booking_holding_the_last_session_books_again(
    engine, client, clock, idp, session, gym, setup, how
):
    pack, row = setup
    booking = _book(client, gym, row).json["data"]
    clock.set(DOOR)
    attendance.check_in(
        session, gym.id, uuid.UUID(booking["id"]), method=CheckinMethod.kiosk,
        actor_user_id=gym.owner.id, now=DOOR,
    )  # fmt: skip
    session.commit()
    url = f"/organizations/{gym.id}/bookings/{booking['id']}"
    staff = _as(idp, Role.coach, DOOR)
    ended = (
        client.post(f"{url}/cancel", headers=staff)
        if how == "cancel"
        else client.delete(url, headers=staff)
    )
    assert ended.status_code == 200, ended.json
    session.refresh(pack)
    assert pack.sessions_remaining == 0  # the check-in kept it spent: the row still holds it

    later = DOOR + timedelta(minutes=5)
    clock.set(later)
    again = _book(client, gym, row, _as(idp, Role.member, later))

    assert again.status_code == 201, again.json
    assert (again.json["data"]["id"], again.json["data"]["subscriptionId"]) == (
        booking["id"],
        str(pack.id),
    )
    session.refresh(pack)
    assert pack.sessions_remaining == 0


def test_a_booking_that_gave_its_session_back_is_refused_on_a_used_up_pack(
    engine, client, session, gym, setup
):
    pack, row = setup
    booking = _book(client, gym, row).json["data"]
    cancelled = client.post(
        f"/organizations/{gym.id}/bookings/{booking['id']}/cancel",
        headers=gym[Role.member].headers,
    )
    assert cancelled.status_code == 200
    session.refresh(pack)
    assert pack.sessions_remaining == 1  # given back on the cancel
    pack.sessions_remaining = 0  # spent elsewhere since
    session.commit()
    before = snapshot(session)

    again = _book(client, gym, row)

    assert (again.status_code, again.json["code"]) == (409, "plan_sessions_used_up")
    assert snapshot(session) == before


def test_cancelling_twice_answers_booking_not_active(engine, client, session, gym, setup):
    _pack, row = setup
    booking = _book(client, gym, row).json["data"]
    url = f"/organizations/{gym.id}/bookings/{booking['id']}/cancel"
    assert client.post(url, headers=gym[Role.member].headers).status_code == 200
    before = snapshot(session)
    twice = client.post(url, headers=gym[Role.member].headers)
    assert (twice.status_code, twice.json["code"]) == (409, "booking_not_active")
    assert snapshot(session) == before
