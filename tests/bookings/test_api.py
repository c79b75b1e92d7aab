"""The booking routes (spec B 4.3, 7): the schedule, book with its 409 bodies, cancel, and
attendance, through the Flask app with real tokens."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models import Role
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

START = (NOW + timedelta(days=1)).isoformat()

gym = access.gym  # the access tests' gym (one person per role, real tokens) over this folder's


@pytest.fixture
def class_session(client, gym):
    coach = gym[Role.coach].headers
    kind = client.post(
        f"/organizations/{gym.id}/class-types",
        json={"name": "Strength 101", "defaultCapacity": 1, "durationMinutes": 45},
        headers=coach,
    )
    assert kind.status_code == 201, kind.json
    row = client.post(
        f"/organizations/{gym.id}/sessions",
        json={"classTypeId": kind.json["data"]["id"], "startsAt": START},
        headers=coach,
    )
    assert row.status_code == 201, row.json
    return row.json["data"]


def _book(client, gym, class_session, role=Role.member, **body):
    return client.post(
        f"/organizations/{gym.id}/sessions/{class_session['id']}/book",
        json=body,
        headers=gym[role].headers,
    )


def test_the_schedule_a_booking_and_the_waitlist(client, gym, class_session):
    assert class_session["endsAt"] == (NOW + timedelta(days=1, minutes=45)).isoformat()
    first = _book(client, gym, class_session)
    assert (first.status_code, first.json["data"]["status"]) == (201, "confirmed")
    second = _book(client, gym, class_session, Role.admin)
    assert second.json["data"]["status"] == "waitlisted"
    listed = client.get(f"/organizations/{gym.id}/sessions", headers=gym[Role.member].headers)
    assert (listed.json["data"][0]["confirmed"], listed.json["data"][0]["waitlisted"]) == (1, 1)
    again = _book(client, gym, class_session)
    assert (again.status_code, again.json["code"]) == (409, "already_booked")
    cancelled = client.post(
        f"/organizations/{gym.id}/bookings/{first.json['data']['id']}/cancel",
        headers=gym[Role.member].headers,
    )
    assert cancelled.json["data"]["status"] == "cancelled"
    roster = client.get(
        f"/organizations/{gym.id}/sessions/{class_session['id']}/bookings",
        headers=gym[Role.coach].headers,
    )
    statuses = {row["userId"]: row["status"] for row in roster.json["data"]}
    assert statuses[str(gym[Role.admin].user.id)] == "confirmed"  # promoted


def test_booking_blocked_debt_answers_409_with_billing_debt(client, session, gym, class_session):
    bf.make_subscription(session, gym, in_debt_since=NOW - timedelta(days=8))
    session.commit()
    before = snapshot(session)
    answer = _book(client, gym, class_session)
    assert (answer.status_code, answer.json["code"]) == (409, "booking_blocked_debt")
    assert set(answer.json["billingDebt"]) == {
        "amountInCents",
        "currency",
        "byCurrency",
        "since",
        "reason",
        "payBy",
        "cancelsAt",
        "state",
    }
    assert snapshot(session) == before


def test_staff_book_for_a_member_members_cannot_book_for_others(client, gym, class_session):
    member_id = str(gym[Role.member].user.id)
    for_owner = _book(client, gym, class_session, Role.admin, userId=str(gym[Role.owner].user.id))
    assert for_owner.json["data"]["userId"] == str(gym[Role.owner].user.id)
    booked = _book(client, gym, class_session, Role.coach, userId=member_id)
    assert booked.json["data"]["userId"] == member_id
    other = _book(client, gym, class_session, Role.member, userId=str(gym[Role.coach].user.id))
    assert (other.status_code, other.json["code"]) == (403, "permission_denied")


def test_a_member_cannot_cancel_someone_elses_booking(client, gym, class_session):
    booking = _book(client, gym, class_session, Role.admin).json["data"]
    answer = client.post(
        f"/organizations/{gym.id}/bookings/{booking['id']}/cancel",
        headers=gym[Role.member].headers,
    )
    assert (answer.status_code, answer.json["code"]) == (404, "booking_not_found")


def test_staff_check_in_and_no_show_refusals(client, gym, class_session):
    coach = gym[Role.coach].headers
    soon = client.post(
        f"/organizations/{gym.id}/sessions",
        json={
            "classTypeId": class_session["classTypeId"],
            "startsAt": (NOW + timedelta(minutes=30)).isoformat(),
        },
        headers=coach,
    ).json["data"]
    booking = _book(client, gym, soon).json["data"]
    url = f"/organizations/{gym.id}/bookings/{booking['id']}"
    early = client.post(f"{url}/no-show", headers=coach)
    assert (early.status_code, early.json["code"]) == (409, "session_not_started")
    checked = client.post(f"{url}/check-in", json={"method": "kiosk"}, headers=coach)
    assert (checked.json["data"]["checkinMethod"], checked.json["data"]["checkedInAt"]) == (
        "kiosk",
        NOW.isoformat(),
    )
    refused = client.post(f"{url}/check-in", json={}, headers=gym[Role.member].headers)
    assert (refused.status_code, refused.json["code"]) == (403, "permission_denied")


def test_bad_schedule_input_is_refused(client, gym):
    coach = gym[Role.coach].headers
    answer = client.post(
        f"/organizations/{gym.id}/class-types",
        json={"name": "x", "defaultCapacity": -1, "durationMinutes": 45},
        headers=coach,
    )
    assert (answer.status_code, answer.json["code"]) == (400, "invalid_body")
    naive = client.post(
        f"/organizations/{gym.id}/sessions",
        json={"classTypeId": "6f1c2a4e-6a3c-4a8e-9d2b-3f5e7c9a1b20", "startsAt": START},
        headers=coach,
    )
    assert (naive.status_code, naive.json["code"]) == (404, "class_type_not_found")
