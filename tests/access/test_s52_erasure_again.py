"""A second erasure of a member is a full erasure again (s52): what reached the gym under the
person's address after the first one is scrubbed by the request that asks for it. A shortcut
that answered a repeat with the first erasure's counts, writing nothing, left a lead made after
it with the person's name and address (found in the session's review, reverted)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import Lead, Role
from tests.access.test_erasure import erase


@pytest.mark.embedded  # the demo gym reaches erasure: both engines
def test_a_second_erasure_scrubs_a_lead_made_after_the_first(engine, client, session, gym):
    person = gym[Role.member].user  # their login keeps the user row and its address
    first = erase(client, gym, person.id)
    assert first.status_code == 200, first.json
    session.add(Lead(organization_id=gym.id, name="Dana Again", email=person.email))
    session.commit()

    again = erase(client, gym, person.id)

    assert again.status_code == 200, again.json
    assert again.json["erased"]["leads"] >= 1
    session.expire_all()
    names = session.scalars(select(Lead.name).where(Lead.organization_id == gym.id)).all()
    assert "Dana Again" not in names
    addresses = session.scalars(select(Lead.email).where(Lead.organization_id == gym.id)).all()
    assert person.email not in addresses
