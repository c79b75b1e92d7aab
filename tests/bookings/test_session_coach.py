"""A session's coach is one of the gym's active staff (spec A 2.3 roles, 2.7: the coach role
holds the sessions and bookings of the programming domain; owner and admin do everything a
coach does). A plain member, or a membership that is not active (removed, suspended,
invited), is refused 422 coach_ineligible; another gym's person or an unknown id 404
member_not_found; nothing is written. A coach who leaves coaches no class to come."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, MembershipStatus, Role
from tests import factories
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

gym = access.gym
START = (NOW + timedelta(days=1)).isoformat()


@pytest.fixture
def class_type(client, gym):
    answer = client.post(
        f"/organizations/{gym.id}/class-types",
        json={"name": "Strength 101", "defaultCapacity": 5, "durationMinutes": 45},
        headers=gym[Role.coach].headers,
    )
    return answer.json["data"]


def _schedule(client, gym, class_type, coach, start=START):
    return client.post(
        f"/organizations/{gym.id}/sessions",
        json={"classTypeId": class_type["id"], "startsAt": start, "coachUserId": coach},
        headers=gym[Role.admin].headers,
    )


@pytest.mark.parametrize("role", [Role.owner, Role.admin, Role.coach])
def test_staff_may_coach_a_session(engine, client, gym, class_type, role):
    answer = _schedule(client, gym, class_type, str(gym[role].user.id))
    assert answer.status_code == 201, answer.json
    assert answer.json["data"]["coachUserId"] == str(gym[role].user.id)


def test_a_plain_member_is_refused_as_coach(engine, client, session, gym, class_type):
    before = snapshot(session)
    answer = _schedule(client, gym, class_type, str(gym[Role.member].user.id))
    assert (answer.status_code, answer.json["code"]) == (422, "coach_ineligible")
    assert snapshot(session) == before


@pytest.mark.parametrize(
    "status",
    [MembershipStatus.cancelled, MembershipStatus.suspended, MembershipStatus.invited],
)
def test_a_coach_whose_membership_is_not_active_is_refused(
    engine, client, session, gym, class_type, status
):
    former = factories.user(session)
    factories.membership(
        session, user=former, organization=gym.organization, role=Role.coach, status=status
    )
    session.commit()
    before = snapshot(session)
    answer = _schedule(client, gym, class_type, str(former.id))
    assert (answer.status_code, answer.json["code"]) == (422, "coach_ineligible")
    assert snapshot(session) == before


def test_another_gyms_coach_or_a_bad_id_is_refused(engine, client, session, gym, class_type):
    elsewhere = factories.make_gym(session, roles=(Role.owner, Role.coach))
    session.commit()
    before = snapshot(session)
    other = _schedule(client, gym, class_type, str(elsewhere[Role.coach].user.id))
    assert (other.status_code, other.json["code"]) == (404, "member_not_found")
    for bad in (12, "not-a-uuid", "x" * 100_000, ["a"], {"id": 1}):
        answer = _schedule(client, gym, class_type, bad)
        assert 400 <= answer.status_code < 500, (bad, answer.json)
    assert snapshot(session) == before


def test_a_removed_coach_coaches_no_class_to_come(engine, client, session, gym, class_type):
    """Staff see "no coach" and assign another; a class that took place keeps its coach."""
    coach, admin = str(gym[Role.coach].user.id), str(gym[Role.admin].user.id)
    yesterday = (NOW - timedelta(days=1)).isoformat()
    held = _schedule(client, gym, class_type, coach, start=yesterday).json["data"]["id"]
    coming = _schedule(client, gym, class_type, coach).json["data"]["id"]
    others = _schedule(client, gym, class_type, admin).json["data"]["id"]

    removed = client.delete(
        f"/organizations/{gym.id}/members/{coach}", headers=gym[Role.owner].headers
    )

    assert removed.status_code == 200, removed.json
    listed = client.get(
        f"/organizations/{gym.id}/sessions",
        query_string={"from": yesterday, "to": (NOW + timedelta(days=2)).isoformat()},
        headers=gym[Role.admin].headers,
    )
    coaches = {row["id"]: row["coachUserId"] for row in listed.json["data"]}
    assert coaches == {held: coach, coming: None, others: admin}
    record = session.scalar(select(AuditLog).where(AuditLog.action == "membership.removed"))
    assert record.data["sessionsUncoached"] == 1
