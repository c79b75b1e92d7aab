"""A lead erasure closed is not converted again (s52). Erasure puts a stand-in for the person's
address and name on the gym's leads and closes them; converting one again answered 200 and
registered an active member named "erased" under an address that reaches no one, queued for the
gym's external system. It now answers as an unknown lead and writes nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import Lead, Role
from tests.access.conftest import snapshot

pytestmark = pytest.mark.embedded  # the demo gym reaches leads and erasure: both engines


def test_a_lead_closed_by_erasure_is_not_converted_again(client, session, gym):
    owner = gym[Role.owner].headers
    made = client.post(
        f"/organizations/{gym.id}/leads",
        json={"name": "Dana", "email": "dana@desk.example"},
        headers=owner,
    )
    lead_id = made.json["id"]
    converted = client.post(f"/organizations/{gym.id}/leads/{lead_id}/convert", headers=owner)
    person = converted.json["userId"]
    erased = client.post(f"/organizations/{gym.id}/members/{person}/erasure", headers=owner)
    assert erased.status_code == 200, erased.json
    [lead] = session.scalars(select(Lead)).all()
    assert lead.status == "closed"
    before = snapshot(session)

    again = client.post(f"/organizations/{gym.id}/leads/{lead_id}/convert", headers=owner)

    assert (again.status_code, again.json["code"]) == (404, "lead_not_found")
    assert snapshot(session) == before
    roster = client.get(f"/organizations/{gym.id}/members", headers=owner).json["members"]
    assert {m["email"] for m in roster} == {f"{role.value}@iron.example" for role in Role}
