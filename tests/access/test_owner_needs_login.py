"""Ownership goes to a person who signs in (s55 noticed, left alone): the owner's transfer to a
profile the desk made (no login yet) left the gym an owner no one could act as. The former owner,
now an admin, could not give it back (role_grant_forbidden), and a platform admin's appointment
found the owner in place (owner_exists). Both doors refuse such a profile now, 409
owner_needs_login with nothing written; once the person signs in, the transfer goes through."""

from __future__ import annotations

from gymctl.access import memberships
from gymctl.models import Role
from tests.access.conftest import snapshot
from tests.access.test_address_forms import desk_person
from tests.conftest import NOW


def _desk_profile(session, gym):
    """An active member the desk made: a profile with no login (identity_id None)."""
    profile = desk_person(session, gym, "pat@example.test")
    session.commit()
    return profile


def test_the_owner_cannot_hand_the_gym_to_a_profile_without_a_login(client, session, gym):
    profile = _desk_profile(session, gym)
    before = snapshot(session)

    refused = client.patch(
        f"/organizations/{gym.id}/members/{profile.id}",
        json={"role": "owner"},
        headers=gym[Role.owner].headers,
    )

    assert (refused.status_code, refused.json["code"]) == (409, "owner_needs_login")
    assert snapshot(session) == before


def test_once_the_profile_has_its_login_the_transfer_goes_through(client, session, gym):
    """The refusal's way forward: the person signs in with the profile's address, which links
    their login to it (identity_id set), and the owner hands the gym over."""
    profile = _desk_profile(session, gym)
    profile.identity_id = "user_pat"
    session.commit()

    moved = client.patch(
        f"/organizations/{gym.id}/members/{profile.id}",
        json={"role": "owner"},
        headers=gym[Role.owner].headers,
    )

    assert moved.status_code == 200, moved.json
    assert moved.json["role"] == "owner"


def test_a_platform_admin_cannot_appoint_a_profile_without_a_login(
    client, session, gym, platform_admin
):
    profile = _desk_profile(session, gym)
    memberships.remove_member(
        session, gym.id, gym[Role.owner].user.id, actor=None,
        actor_user_id=platform_admin.user.id, platform_admin=True, now=NOW,
    )  # fmt: skip
    session.commit()
    before = snapshot(session)

    refused = client.put(
        f"/admin/organizations/{gym.id}/owner",
        json={"userId": str(profile.id)},
        headers=platform_admin.headers,
    )

    assert (refused.status_code, refused.json["code"]) == (409, "owner_needs_login")
    assert snapshot(session) == before
