"""Erasure of a member whose login the identity provider deleted: the person's row is erased
("The person's row (address, name, avatar, national id) is erased and soft-deleted only when no
other organization holds an uncancelled membership and no login is theirs", decisions), and so
must the provider sessions recorded under it: each keeps the IP, the browser and the city the
person signed in from (personal data, DESIGN 6: IPs never kept where they are not needed), and
`gymctl users ownership-trail` shows them for the erased person."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.sessions import clear_cache, record_session
from gymctl.models import Role, User, UserSession
from tests.api.test_identity_webhook import deliver
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_erasing_the_persons_row_leaves_no_ip_browser_or_city_of_their_sessions(
    engine, client, session, gym, idp
):
    clear_cache()
    member = gym[Role.member].user
    record_session(
        session,
        user_id=member.id,
        session_id="sess_mona",
        ip="203.0.113.77",
        user_agent="Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X)",
        city="Lisbon",
        country="PT",
        impersonated_by=None,
        now=NOW,
    )
    session.commit()
    deleted = deliver(
        client, {"type": "user.deleted", "data": {"id": member.identity_id, "deleted": True}}
    )
    assert deleted.status_code == 200

    response = client.post(
        f"/organizations/{gym.id}/members/{member.id}/erasure", headers=gym[Role.owner].headers
    )
    assert response.status_code == 200, response.json
    assert response.json["erased"]["userRowErased"] is True

    session.expire_all()
    assert session.get(User, member.id).email is None
    left = [
        (row.ip, row.user_agent, row.city)
        for row in session.scalars(select(UserSession).where(UserSession.user_id == member.id))
        if row.ip or row.user_agent or row.city
    ]
    assert left == [], "the erased person's sessions keep their IP, browser and city"
    clear_cache()
