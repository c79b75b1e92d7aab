"""A seat the member lost without asking is pushed to them, once, in their app's language, as a
promotion is (releases.push_notices): staff cancelling the class (booking.cancelled, reason
session_cancelled, POST /organizations/:orgId/sessions/:id/cancel), the waitlist closing when
the class starts (reason waitlist_closed, the no-show pass), the plan that paid the seat ending
(planEnded, bookings.book.give_up_uncovered), and staff cancelling or removing the booking. A
booking the member cancelled themselves is never pushed; a notice no longer true (booked again)
or too late (the class is over) is recorded and not pushed."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from daemons.jobs import member_pushes
from gymctl.billing import attempts
from gymctl.bookings import attendance
from gymctl.models import Role, Subscription
from gymctl.models.billing import PlanType
from gymctl.models.releases import PushNotice
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import TOMORROW, book_over_http, schedule_over_http
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

IOS_ID = "com.gymctl.gym.iron-temple"
WHEN = TOMORROW.strftime("%Y-%m-%d %H:%M")  # the suite's gym keeps UTC
SOON = NOW + timedelta(minutes=1)
NOTHING = {"pushed": 0, "unreached": 0, "failed": 0, "skipped": 0}


def _register(client, gym, role, locale):
    answer = client.post(
        f"/organizations/{gym.id}/push-registrations",
        json={"appId": IOS_ID, "platform": "ios", "token": f"apns-{role.value}"},
        headers={**gym[role].headers, "X-Locale": locale},
    )
    assert answer.status_code == 201, answer.json


def _cancel_class(client, gym, class_id):
    answer = client.post(
        f"/organizations/{gym.id}/sessions/{class_id}/cancel", headers=gym[Role.coach].headers
    )
    assert answer.status_code == 200, answer.json


def _cancel_booking(client, gym, booking_id, role):
    answer = client.post(
        f"/organizations/{gym.id}/bookings/{booking_id}/cancel", headers=gym[role].headers
    )
    assert answer.status_code == 200, answer.json


def _pushed(settings) -> list[dict]:
    outbox = settings.home / "push" / "outbox.jsonl"
    return [json.loads(line) for line in outbox.read_text().splitlines()] if outbox.exists() else []


def _records(session) -> int:
    return session.scalar(select(func.count()).select_from(PushNotice))


def test_a_class_staff_cancel_is_pushed_to_each_booked_member_once_in_their_language(
    client, session, session_factory, settings, gym, branded
):
    """The member held the seat (app in Spanish), the admin waited (app in English): both are
    told the class is off, once, and the member that the pack's session is back."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    make_subscription(
        session, gym, PlanType.pack, membership=gym[Role.member].membership, sessions_remaining=3
    )
    make_subscription(session, gym, PlanType.card, membership=gym[Role.admin].membership)
    session.commit()
    _register(client, gym, Role.member, "es")
    _register(client, gym, Role.admin, "en")
    class_id = schedule_over_http(client, gym)["id"]
    seat = book_over_http(client, gym, class_id, Role.member)
    waiting = book_over_http(client, gym, class_id, Role.admin)
    assert waiting["status"] == "waitlisted"

    _cancel_class(client, gym, class_id)
    first = member_pushes(session_factory, SOON, settings)
    again = member_pushes(session_factory, SOON + timedelta(minutes=1), settings)

    assert first == {**NOTHING, "pushed": 2}
    assert again == NOTHING
    by_booking = {message["data"]["bookingId"]: message for message in _pushed(settings)}
    gym_name = gym.organization.name
    spanish, english = by_booking[seat["id"]], by_booking[waiting["id"]]
    assert spanish["title"] == f"{gym_name}: clase cancelada"
    assert spanish["body"] == (
        f"La clase Strength 101 del {WHEN} se canceló, y con ella tu reserva. "
        "La sesión que usaste vuelve a tu plan."
    )
    assert english["title"] == f"{gym_name}: class cancelled"
    assert english["body"] == f"Strength 101 on {WHEN} is cancelled, and your booking with it."
    assert spanish["data"] == {
        "event": "booking.cancelled",
        "bookingId": seat["id"],
        "notice": "class_cancelled",
    }


def test_a_waitlist_closed_when_its_class_starts_is_pushed_by_the_no_show_pass(
    client, session, session_factory, settings, gym, branded
):
    """The member waited in Hebrew; the class began with no seat freed: the no-show pass
    closes the waitlist and the member hears they are off it, not "waitlisted" for ever."""
    _register(client, gym, Role.member, "he")
    class_id = schedule_over_http(client, gym)["id"]
    book_over_http(client, gym, class_id, Role.admin)
    waiting = book_over_http(client, gym, class_id, Role.member)
    assert waiting["status"] == "waitlisted"
    started = TOMORROW + timedelta(minutes=5)

    closed = attendance.no_show_pass(session, now=started)
    session.commit()
    first = member_pushes(session_factory, started, settings)
    again = member_pushes(session_factory, started + timedelta(minutes=1), settings)

    assert closed["waitlistsClosed"] == 1
    assert first == {**NOTHING, "pushed": 1}
    assert again == NOTHING
    [message] = _pushed(settings)
    assert message["title"] == f"{gym.organization.name}: לא התפנה מקום"
    assert message["body"] == (
        f"השיעור Strength 101 ב-{WHEN} התחיל ולא התפנה לך מקום, ולכן יצאת מרשימת ההמתנה."
    )
    assert message["data"] == {
        "event": "booking.cancelled",
        "bookingId": waiting["id"],
        "notice": "waitlist_closed",
    }


def test_a_seat_staff_cancelled_or_removed_is_pushed(
    client, session, session_factory, settings, gym, branded
):
    _register(client, gym, Role.member, "en")
    one, other = (
        schedule_over_http(client, gym, name=n)["id"] for n in ("Strength 101", "Mobility")
    )
    cancelled = book_over_http(client, gym, one, Role.member)
    removed = book_over_http(client, gym, other, Role.member)

    _cancel_booking(client, gym, cancelled["id"], Role.coach)
    answer = client.delete(
        f"/organizations/{gym.id}/bookings/{removed['id']}", headers=gym[Role.coach].headers
    )
    assert answer.status_code == 200, answer.json
    outcome = member_pushes(session_factory, SOON, settings)

    assert outcome == {**NOTHING, "pushed": 2}
    gym_name = gym.organization.name
    bodies = {message["data"]["bookingId"]: message for message in _pushed(settings)}
    assert bodies[cancelled["id"]]["title"] == f"{gym_name}: booking cancelled"
    assert bodies[cancelled["id"]]["body"] == (
        f"{gym_name} cancelled your booking for Strength 101 on {WHEN}."
    )
    assert (
        bodies[removed["id"]]["body"]
        == f"{gym_name} cancelled your booking for Mobility on {WHEN}."
    )
    assert bodies[removed["id"]]["data"]["event"] == "booking.removed"


def test_a_seat_given_up_because_the_plan_ended_is_pushed(
    client, session, session_factory, settings, gym, branded
):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    pack = make_subscription(
        session, gym, PlanType.pack, membership=gym[Role.member].membership, sessions_remaining=3
    )
    session.commit()
    _register(client, gym, Role.member, "en")
    seat = book_over_http(client, gym, schedule_over_http(client, gym)["id"], Role.member)

    attempts.end_plan(
        session, session.get(Subscription, pack.id), reason=attempts.SUPERSEDED, now=SOON
    )
    session.commit()
    outcome = member_pushes(session_factory, SOON, settings)

    assert outcome == {**NOTHING, "pushed": 1}
    [message] = _pushed(settings)
    assert message["title"] == f"{gym.organization.name}: booking cancelled"
    assert message["body"] == (
        f"Your plan no longer covers Strength 101 on {WHEN}, so your booking was cancelled."
    )
    assert message["data"] == {
        "event": "booking.cancelled",
        "bookingId": seat["id"],
        "notice": "plan_ended",
    }


def test_a_booking_the_member_cancelled_themselves_is_never_pushed(
    client, session, session_factory, settings, gym, branded
):
    """Their own act, on the device in their hand: nothing to push, nothing to record."""
    _register(client, gym, Role.member, "en")
    seat = book_over_http(client, gym, schedule_over_http(client, gym)["id"], Role.member)

    _cancel_booking(client, gym, seat["id"], Role.member)
    outcome = member_pushes(session_factory, SOON, settings)

    assert outcome == NOTHING
    assert _pushed(settings) == []
    assert _records(session) == 0


def test_a_cancel_no_longer_true_or_too_late_is_recorded_and_not_pushed(
    client, session, session_factory, settings, gym, branded
):
    """Staff cancelled the member's seat and the member booked it again before the job ran
    ("cancelled" would be false); a class cancelled while the job was down is over by the time
    it runs (nothing left to act on). Both are settled, neither pushed."""
    _register(client, gym, Role.member, "en")
    one = schedule_over_http(client, gym, name="Strength 101")["id"]
    rebooked = book_over_http(client, gym, one, Role.member)
    _cancel_booking(client, gym, rebooked["id"], Role.coach)
    assert book_over_http(client, gym, one, Role.member)["id"] == rebooked["id"]
    late = schedule_over_http(client, gym, name="Mobility")["id"]
    book_over_http(client, gym, late, Role.member)
    _cancel_class(client, gym, late)

    outcome = member_pushes(session_factory, TOMORROW + timedelta(hours=1), settings)

    assert outcome == {**NOTHING, "unreached": 2}
    assert _pushed(settings) == []
    assert _records(session) == 2
