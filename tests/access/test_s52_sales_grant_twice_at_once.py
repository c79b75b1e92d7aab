"""A sales grant given twice at once (a double tap, two admins) is one live grant (s52). Both
requests read no live grant and inserted one: the second broke the one live grant per
membership and answered 500. The second now finds the first's grant and writes its terms over
it (the later wins), as a grant given again does."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access import sales
from gymctl.models import Role, SalesGrant
from tests.lost_race import miss_once

pytestmark = pytest.mark.embedded  # the demo gym reaches sales grants: both engines


def test_a_grant_that_lost_the_race_to_another_is_that_grant(client, session, gym, monkeypatch):
    coach = gym[Role.coach]
    url = f"/organizations/{gym.id}/sales-grants"
    first = client.post(
        url, json={"userId": str(coach.user.id), "scope": "own"}, headers=gym[Role.owner].headers
    )
    assert first.status_code == 201
    miss_once(monkeypatch, sales, "_live_grant")  # its check ran before the first committed

    second = client.post(
        url,
        json={"userId": str(coach.user.id), "scope": "team", "manager": True},
        headers=gym[Role.admin].headers,
    )

    assert second.status_code == 201, second.json
    assert second.json == {"id": first.json["id"], "scope": "team", "manager": True}
    session.expire_all()
    [live] = session.scalars(
        select(SalesGrant).where(
            SalesGrant.membership_id == coach.membership.id, SalesGrant.revoked_at.is_(None)
        )
    ).all()
    assert (live.scope, live.manager, live.granted_by_user_id) == (
        "team",
        True,
        gym[Role.admin].user.id,
    )
