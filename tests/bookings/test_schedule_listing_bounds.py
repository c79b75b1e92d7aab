"""The schedule's reads and names are bounded: `GET .../sessions` answers a page of sessions
at a time (its seat counts read with one bind parameter a session: a huge schedule passed
PostgreSQL's 65,535 and answered 500), and a class type's name is one line, as a brand's
name is (`branding.workspace._brand_name`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select

from gymctl import ids
from gymctl.models import ClassSession, ClassType, Role
from tests.access import conftest as access
from tests.access.conftest import snapshot
from tests.bookings.test_api import class_session  # noqa: F401 (fixture)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

gym = access.gym
PAGE = 500  # sessions a page of the schedule answers (webhooks.blueprints.bookings)


def _kind(session, gym):
    return session.scalar(select(ClassType).where(ClassType.organization_id == gym.id))


def test_the_schedule_lists_a_page_at_a_time_and_the_cursor_walks_it_whole(
    client,
    session,
    gym,
    class_session,  # noqa: F811 (fixture)
):
    """More sessions than a page, a dozen sharing one start instant across the page's edge:
    each page is at most SESSIONS_PAGE long, the cursor gives the rest, none twice or left."""
    kind = _kind(session, gym)
    start = NOW + timedelta(days=2)
    rows = [
        {
            "id": ids.new_id(),
            "organization_id": gym.id,
            "class_type_id": kind.id,
            "starts_at": start + timedelta(minutes=max(i - 12, 0)),
            "ends_at": start + timedelta(minutes=max(i - 12, 0) + 60),
            "capacity": 5,
            "created_at": NOW,
        }
        for i in range(PAGE + 20)
    ]
    session.execute(insert(ClassSession), rows)
    session.commit()
    headers = gym[Role.member].headers
    url = f"/organizations/{gym.id}/sessions"

    seen, pages, cursor = [], 0, None
    while True:
        query = {"to": (NOW + timedelta(days=30)).isoformat()}
        query |= {"cursor": cursor} if cursor else {}
        page = client.get(url, query_string=query, headers=headers)
        assert page.status_code == 200, page.json
        assert len(page.json["data"]) <= PAGE
        seen += [row["id"] for row in page.json["data"]]
        pages += 1
        cursor = page.json["nextCursor"]
        if cursor is None:
            break
    assert pages == 2
    assert len(seen) == len(set(seen)) == PAGE + 21  # the fixture's too
    assert seen[0] == class_session["id"]


def test_a_schedule_cursor_not_of_this_gym_is_refused(client, gym):
    headers = gym[Role.member].headers
    url = f"/organizations/{gym.id}/sessions"
    for cursor in (str(ids.new_id()), "not-a-session"):
        answer = client.get(url, query_string={"cursor": cursor}, headers=headers)
        assert (answer.status_code, answer.json["code"]) == (400, "cursor_invalid")


@pytest.mark.parametrize("name", ["Strength\r\nBcc: x", "Strength\n101", "Yoga\u2028Flow"])
def test_a_class_type_name_is_one_line(client, session, gym, name):
    before = snapshot(session)
    answer = client.post(
        f"/organizations/{gym.id}/class-types",
        json={"name": name, "defaultCapacity": 5, "durationMinutes": 60},
        headers=gym[Role.coach].headers,
    )
    assert (answer.status_code, answer.json["code"]) == (400, "class_type_name_invalid")
    assert snapshot(session) == before
    assert session.scalar(select(func.count()).select_from(ClassType)) == 0
