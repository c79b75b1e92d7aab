"""Spec A 6.4 fanout, fed: a waitlisted member whose booking becomes a seat is pushed on the
devices their gym's app registered, once, in the app's language. Bookings write the event
(`booking.promoted`), the daemons' `member_pushes` job reads it and delivers through
`push.deliver`, which revalidates every registration at send time."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from daemons.jobs import member_pushes
from gymctl.models import Role
from gymctl.models.releases import PushNotice, PushRegistration
from gymctl.providers.push import LocalPushProvider, PushMessage
from gymctl.releases.push_notices import LOOKBACK, push_notices
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

IOS_ID = "com.gymctl.gym.iron-temple"
SOON = NOW + timedelta(minutes=1)


@pytest.fixture
def waitlist(client, gym, branded):
    """A class of one seat: the admin holds it, the member waits with a device registered in
    Hebrew. Returns the member's booking id and the admin's."""
    registered = client.post(
        f"/organizations/{gym.id}/push-registrations",
        json={"appId": IOS_ID, "platform": "ios", "token": "apns-member"},
        headers={**gym[Role.member].headers, "X-Locale": "he"},
    )
    assert registered.status_code == 201, registered.json
    coach = gym[Role.coach].headers
    kind = client.post(
        f"/organizations/{gym.id}/class-types",
        json={"name": "Strength 101", "defaultCapacity": 1, "durationMinutes": 45},
        headers=coach,
    )
    starts = (NOW + timedelta(days=1)).isoformat()
    row = client.post(
        f"/organizations/{gym.id}/sessions",
        json={"classTypeId": kind.json["data"]["id"], "startsAt": starts},
        headers=coach,
    ).json["data"]
    bookings = {}
    for role in (Role.admin, Role.member):
        booked = client.post(
            f"/organizations/{gym.id}/sessions/{row['id']}/book", json={}, headers=gym[role].headers
        )
        assert booked.status_code == 201, booked.json
        bookings[role] = booked.json["data"]["id"]
    return bookings


def _cancel(client, gym, booking_id, role):
    answer = client.post(
        f"/organizations/{gym.id}/bookings/{booking_id}/cancel", headers=gym[role].headers
    )
    assert answer.status_code == 200, answer.json


def _pushed(settings) -> list[dict]:
    outbox = settings.home / "push" / "outbox.jsonl"
    return [json.loads(line) for line in outbox.read_text().splitlines()] if outbox.exists() else []


def test_a_seat_that_became_the_members_is_pushed_once_in_the_apps_language(
    client, session, session_factory, settings, gym, waitlist
):
    _cancel(client, gym, waitlist[Role.admin], Role.admin)  # the member is promoted

    first = member_pushes(session_factory, SOON, settings)
    again = member_pushes(session_factory, SOON + timedelta(minutes=1), settings)

    assert first == {"pushed": 1, "unreached": 0, "failed": 0, "skipped": 0}
    assert again == {"pushed": 0, "unreached": 0, "failed": 0, "skipped": 0}
    [message] = _pushed(settings)
    assert message["appId"] == IOS_ID
    assert message["title"] == f"{gym.organization.name}: נכנסת לשיעור"
    assert "Strength 101" in message["body"]
    assert (NOW + timedelta(days=1)).strftime("%Y-%m-%d %H:%M") in message["body"]  # UTC gym
    assert message["data"] == {"event": "booking.promoted", "bookingId": waitlist[Role.member]}
    locale = session.scalar(select(PushRegistration.locale))
    assert locale == "he"


def test_a_seat_given_up_before_the_push_is_recorded_and_not_pushed(
    client, session, session_factory, settings, gym, waitlist
):
    """The member cancelled the promoted booking before the job ran: "you're in" would be
    false, so nothing is pushed, and the event is settled all the same."""
    _cancel(client, gym, waitlist[Role.admin], Role.admin)
    _cancel(client, gym, waitlist[Role.member], Role.member)

    outcome = member_pushes(session_factory, SOON, settings)

    assert outcome == {"pushed": 0, "unreached": 1, "failed": 0, "skipped": 0}
    assert _pushed(settings) == []
    assert session.scalar(select(func.count()).select_from(PushNotice)) == 1


def test_a_provider_error_is_retried_next_run_and_old_events_are_left_alone(
    client, session, session_factory, settings, gym, waitlist, tmp_path
):
    class Down(LocalPushProvider):
        def send(self, message: PushMessage):
            raise ConnectionError("the push service is down")

    _cancel(client, gym, waitlist[Role.admin], Role.admin)

    failed = push_notices(session_factory, Down(tmp_path / "down"), now=SOON)
    late = push_notices(session_factory, LocalPushProvider(tmp_path / "up"), now=NOW + LOOKBACK * 2)
    retried = push_notices(session_factory, LocalPushProvider(tmp_path / "up"), now=SOON)

    assert failed["failed"] == 1
    assert late == {"pushed": 0, "unreached": 0, "failed": 0, "skipped": 0}  # past LOOKBACK
    assert retried["pushed"] == 1
    assert len((tmp_path / "up" / "outbox.jsonl").read_text().splitlines()) == 1
