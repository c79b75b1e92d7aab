"""Erasure after the identity provider deleted the member's login: the person's row is kept
only while "no other organization holds an uncancelled membership and no login is theirs"
(docs/decisions.md, personal-data erasure). A deleted login (user.deleted, spec A 6.1) is no
one's, so the row's name, address and avatar go."""

from __future__ import annotations

import pytest

from gymctl.models import Role, User
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.api.test_identity_webhook import deliver

pytestmark = pytest.mark.embedded


def test_erasing_a_member_whose_login_was_deleted_erases_their_row(
    engine,
    client,
    session,
    gym,  # noqa: F811
    idp,
):
    member = gym[Role.member].user
    member.name = "Mona Member"
    member.image_url = "https://img.example.test/mona.png"
    session.commit()
    deleted = deliver(
        client, {"type": "user.deleted", "data": {"id": member.identity_id, "deleted": True}}
    )
    assert (deleted.status_code, deleted.json["outcome"]) == (200, "deleted")

    response = client.post(
        f"/organizations/{gym.id}/members/{member.id}/erasure", headers=gym[Role.owner].headers
    )

    assert response.status_code == 200, response.json
    session.expire_all()
    row = session.get(User, member.id)
    # No live login is theirs and no other gym holds them: the row is erased.
    assert response.json["erased"]["userRowErased"] is True
    assert (row.email, row.name, row.image_url) == (None, None, None)
