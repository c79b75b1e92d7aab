"""A gym whose owner cannot sign in is not locked out (s59). Spec A 2.7: one owner per
organization, "removable only by a platform admin"; a transfer goes to the caller's chosen
member and the former owner becomes admin (decisions, "One owner, always"). Before s55 refused
it (owner_needs_login), an owner could hand the gym to a profile the desk made, with no login:
no one can act as that owner, the former owner (now an admin) cannot transfer it back, and the
platform admin's appointment answered 409 owner_exists. The appointment now replaces an owner
with no login as it replaces one whose login was deleted; the profile, a real member of the
gym, keeps its membership as admin (what a transfer leaves the former owner)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, Membership, MembershipStatus, Role
from tests.access.conftest import snapshot
from tests.access.test_address_forms import desk_person
from tests.access.test_s52_appoint_owner import owner_path, owners

pytestmark = pytest.mark.embedded  # the demo gym reaches appoint-owner: both engines


def _handed_to_a_profile(session, gym):
    """The gym as a pre-s55 transfer left it: a desk profile owns it, the owner is an admin."""
    profile = desk_person(session, gym, "pat@example.test")
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == profile.id
        )
    )
    membership.role = Role.owner
    gym[Role.owner].membership.role = Role.admin
    session.commit()
    return profile, membership


def test_an_owner_without_a_login_is_replaced_and_stays_as_admin(
    client, session, gym, platform_admin
):
    profile, membership = _handed_to_a_profile(session, gym)
    former = gym[Role.owner].user

    response = client.put(
        owner_path(gym), json={"userId": str(former.id)}, headers=platform_admin.headers
    )

    assert response.status_code == 200, response.json
    assert response.json["changed"] is True
    assert response.json["formerOwnerUserId"] == str(profile.id)
    assert owners(session, gym) == [former.id]
    kept = session.get(Membership, membership.id)
    assert (kept.role, kept.status) == (Role.admin, MembershipStatus.active)
    demoted = session.scalar(
        select(AuditLog).where(
            AuditLog.action == "membership.role_changed", AuditLog.target_id == str(profile.id)
        )
    )
    assert (demoted.data["from"], demoted.data["to"]) == ("owner", "admin")
    assert demoted.data["platformAdmin"] is True
    assert demoted.actor_user_id == platform_admin.user.id


def test_the_owner_without_a_login_is_not_appointed_again(client, session, gym, platform_admin):
    """Appointing the profile itself stays owner_needs_login (s55), nothing written: it is no
    owner anyone can act as, so it is no repeat either."""
    profile, _ = _handed_to_a_profile(session, gym)
    before = snapshot(session)

    refused = client.put(
        owner_path(gym), json={"userId": str(profile.id)}, headers=platform_admin.headers
    )

    assert (refused.status_code, refused.json["code"]) == (409, "owner_needs_login")
    assert snapshot(session) == before
