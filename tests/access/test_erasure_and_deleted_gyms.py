"""Erasure of a person who was also a member of a gym since deleted (access.erasure with
access.gyms.delete_organization).

decisions: "The person's row (address, name, avatar, national id) is erased and soft-deleted only
when no other organization holds an uncancelled membership and no login is theirs (... another
gym's data is that gym's to erase)". A deleted gym holds no one: its owner can no longer reach
its routes, so its memberships (left active by the soft delete) can never be erased by it. They
must not keep the person's name and address alive for good after the last live gym erased them."""

from __future__ import annotations

import pytest

from gymctl.models import Role, User
from tests import factories
from tests.factories import signed_in

pytestmark = pytest.mark.embedded


def test_a_deleted_gyms_membership_does_not_keep_the_erased_persons_row(client, session, gym, idp):
    person = factories.user(
        session, identity_id=None, email="dana@desk.example", name="Dana", signup_origin="desk"
    )
    factories.membership(session, user=person, organization=gym.organization)
    other = factories.organization(session, name="Closed Gym")
    other_owner = signed_in(idp, session, identity_id="user_closed_owner", email="o@closed.example")
    factories.membership(session, user=other_owner.user, organization=other, role=Role.owner)
    factories.membership(session, user=person, organization=other)
    session.commit()

    deleted = client.delete(f"/organizations/{other.id}", headers=other_owner.headers)
    assert deleted.status_code == 200, deleted.json
    # The deleted gym's owner can no longer erase anything there.
    theirs = client.post(
        f"/organizations/{other.id}/members/{person.id}/erasure", headers=other_owner.headers
    )
    assert theirs.status_code >= 400

    erased = client.post(
        f"/organizations/{gym.id}/members/{person.id}/erasure", headers=gym[Role.owner].headers
    )
    assert erased.status_code == 200, erased.json

    session.expire_all()
    row = session.get(User, person.id)
    assert (row.email, row.name) == (None, None), (
        f"userRowErased={erased.json['erased']['userRowErased']}: a deleted gym's membership "
        "kept the person's name and address for good"
    )
