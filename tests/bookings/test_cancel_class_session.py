"""Staff cancel a class session (spec A 2.7: the coach role holds sessions and bookings "full
CRUD incl. delete"; spec B 2.4 keeps a cancelled booking's row). POST
/organizations/:orgId/sessions/:sessionId/cancel: the session keeps its row with cancelledAt,
every booking of it is cancelled (booking.cancelled, reason session_cancelled: the member is
told), the pack sessions they spent come back, and nothing is booked there again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import OutboxEvent, Role
from gymctl.models.billing import PlanType
from tests import factories
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import TOMORROW, book_over_http, schedule_over_http

pytestmark = pytest.mark.embedded

gym = access.gym


@pytest.fixture
def class_session(client, gym):
    return schedule_over_http(client, gym)


def _cancel(client, gym, session_id, role=Role.coach):
    return client.post(
        f"/organizations/{gym.id}/sessions/{session_id}/cancel", headers=gym[role].headers
    )


def test_staff_cancel_a_class_and_its_bookings(engine, client, session, gym, class_session):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    pack = make_subscription(
        session, gym, PlanType.pack, membership=gym[Role.member].membership, sessions_remaining=3
    )
    make_subscription(session, gym, PlanType.card, membership=gym[Role.admin].membership)
    session.commit()
    seat = book_over_http(client, gym, class_session["id"], Role.member)
    waiting = book_over_http(client, gym, class_session["id"], Role.admin)
    assert waiting["status"] == "waitlisted"
    session.refresh(pack)
    assert pack.sessions_remaining == 2

    answer = _cancel(client, gym, class_session["id"])

    assert answer.status_code == 200, answer.json
    assert answer.json["data"]["cancelledAt"] is not None
    assert answer.json["cancelledBookings"] == 2
    roster = client.get(
        f"/organizations/{gym.id}/sessions/{class_session['id']}/bookings",
        headers=gym[Role.coach].headers,
    ).json["data"]
    assert {row["id"]: row["status"] for row in roster} == {
        seat["id"]: "cancelled",
        waiting["id"]: "cancelled",
    }
    session.refresh(pack)
    assert pack.sessions_remaining == 3
    reasons = session.scalars(
        select(OutboxEvent.payload).where(OutboxEvent.name == "booking.cancelled")
    ).all()
    assert sorted(p["reason"] for p in reasons) == ["session_cancelled", "session_cancelled"]
    assert session.scalars(
        select(OutboxEvent).where(OutboxEvent.name == "class_session.cancelled")
    ).one()
    listed = client.get(f"/organizations/{gym.id}/sessions", headers=gym[Role.member].headers).json[
        "data"
    ]
    assert (listed[0]["cancelledAt"], listed[0]["confirmed"]) == (
        answer.json["data"]["cancelledAt"],
        0,
    )
    again = client.post(
        f"/organizations/{gym.id}/sessions/{class_session['id']}/book",
        json={},
        headers=gym[Role.member].headers,
    )
    assert (again.status_code, again.json["code"]) == (409, "session_cancelled")


def test_cancelling_twice_or_after_the_start_is_refused(
    engine, client, clock, idp, session, gym, class_session
):
    assert _cancel(client, gym, class_session["id"]).status_code == 200
    before = snapshot(session)
    twice = _cancel(client, gym, class_session["id"])
    assert (twice.status_code, twice.json["code"]) == (409, "session_cancelled")
    assert snapshot(session) == before

    later = client.post(
        f"/organizations/{gym.id}/sessions",
        json={"classTypeId": class_session["classTypeId"], "startsAt": TOMORROW.isoformat()},
        headers=gym[Role.coach].headers,
    ).json["data"]
    at = TOMORROW + timedelta(minutes=1)
    clock.set(at)
    before = snapshot(session)
    started = client.post(
        f"/organizations/{gym.id}/sessions/{later['id']}/cancel",
        headers={"Authorization": f"Bearer {idp.token('user_coach', now=at)}"},
    )
    assert (started.status_code, started.json["code"]) == (409, "session_started")
    assert snapshot(session) == before


def test_members_and_other_gyms_cannot_cancel_a_class(engine, client, session, gym, class_session):
    book_over_http(client, gym, class_session["id"], Role.member)
    elsewhere = factories.make_gym(session)
    session.commit()
    before = snapshot(session)
    member = _cancel(client, gym, class_session["id"], Role.member)
    assert (member.status_code, member.json["code"]) == (403, "permission_denied")
    unknown = client.post(
        f"/organizations/{elsewhere.id}/sessions/{class_session['id']}/cancel",
        headers=gym[Role.coach].headers,
    )
    assert 400 <= unknown.status_code < 500
    assert snapshot(session) == before
    # this gym's route with an id that is another gym's, or none at all
    from gymctl.bookings import schedule

    kind = schedule.create_class_type(
        session, elsewhere.id, name="Theirs", default_capacity=3, duration_minutes=30,
        now=TOMORROW - timedelta(days=1),
    )  # fmt: skip
    theirs = schedule.schedule_session(
        session, kind, starts_at=TOMORROW, now=TOMORROW - timedelta(days=1)
    )
    session.commit()
    before = snapshot(session)
    foreign = _cancel(client, gym, theirs.id)
    assert (foreign.status_code, foreign.json["code"]) == (404, "session_not_found")
    bad = client.post(
        f"/organizations/{gym.id}/sessions/not-a-uuid/cancel", headers=gym[Role.coach].headers
    )
    assert 400 <= bad.status_code < 500
    assert bad.is_json
    assert snapshot(session) == before
