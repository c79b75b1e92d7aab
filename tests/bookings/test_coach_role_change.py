"""A class is coached by active staff: someone whose role changes to one that may not coach
(member) coaches no class to come, as one who leaves (tests/bookings/test_session_coach.py).
Classes that started keep their coach; a change between staff roles keeps every class."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, Role
from tests.access import conftest as access
from tests.bookings import test_session_coach as coaching
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

gym = access.gym
class_type = coaching.class_type
_schedule = coaching._schedule

YESTERDAY = (NOW - timedelta(days=1)).isoformat()


def _coaches(client, gym):
    listed = client.get(
        f"/organizations/{gym.id}/sessions",
        query_string={"from": YESTERDAY, "to": (NOW + timedelta(days=2)).isoformat()},
        headers=gym[Role.owner].headers,
    )
    assert listed.status_code == 200, listed.json
    return {row["id"]: row["coachUserId"] for row in listed.json["data"]}


def _change_role(client, gym, user_id, role):
    return client.patch(
        f"/organizations/{gym.id}/members/{user_id}",
        json={"role": role},
        headers=gym[Role.owner].headers,
    )


@pytest.mark.parametrize(("before", "after"), [(Role.coach, "member"), (Role.admin, "member")])
def test_staff_made_a_member_coaches_no_class_to_come(
    engine, client, session, gym, class_type, before, after
):
    person, other = str(gym[before].user.id), str(gym[Role.owner].user.id)
    held = _schedule(client, gym, class_type, person, start=YESTERDAY).json["data"]["id"]
    coming = _schedule(client, gym, class_type, person).json["data"]["id"]
    others = _schedule(client, gym, class_type, other).json["data"]["id"]

    changed = _change_role(client, gym, person, after)

    assert changed.status_code == 200, changed.json
    assert _coaches(client, gym) == {held: person, coming: None, others: other}
    record = session.scalar(select(AuditLog).where(AuditLog.action == "membership.role_changed"))
    assert record.data["sessionsUncoached"] == 1


@pytest.mark.parametrize(("before", "after"), [(Role.coach, "admin"), (Role.admin, "coach")])
def test_a_change_between_staff_roles_keeps_the_classes(
    engine, client, session, gym, class_type, before, after
):
    person = str(gym[before].user.id)
    coming = _schedule(client, gym, class_type, person).json["data"]["id"]

    changed = _change_role(client, gym, person, after)

    assert changed.status_code == 200, changed.json
    assert _coaches(client, gym) == {coming: person}
    record = session.scalar(select(AuditLog).where(AuditLog.action == "membership.role_changed"))
    assert record.data["sessionsUncoached"] == 0
