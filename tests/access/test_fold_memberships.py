"""One person's two rows folded into one (access.folding, spec A 5.3; decisions s41): the gym's
membership of the person that did start is never deleted by a link, so nothing the gym
collected on it is lost, and a link never lifts a suspension the gym decided."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.access.compliance import national_id
from gymctl.models import Membership, MembershipStatus, Organization, Role
from tests import factories
from tests.access import test_national_id as national
from tests.access.conftest import signed_in
from tests.access.test_email_ownership import desk

pytestmark = pytest.mark.embedded

NATIONAL_ID = national.NATIONAL_ID
keyed_settings = national.keyed_settings  # fixtures: settings with NATIONAL_ID_ENCRYPTION_KEY
keyed_client = national.keyed_client

PAT = "pat@example.test"


def held_by(session, gym, user_id) -> Membership:
    session.expire_all()
    return session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == user_id
        )
    )


def signs_up_and_joins(session, idp, gym):
    """Pat's own login (unproven, from a join link), an active member of the gym."""
    pat = signed_in(idp, session, identity_id="user_pat", email=PAT, verified=False)
    factories.membership(session, user=pat.user, organization=session.get(Organization, gym.id))
    session.commit()
    return pat


def proven_and_signed_in(client, platform_admin, pat):
    client.post("/admin/users/user_pat/mark-email-verified", headers=platform_admin.headers)
    return client.get("/users/me", headers=pat.headers)


def test_a_link_keeps_the_national_id_the_gym_collected_on_a_membership_it_ended(
    keyed_client, keyed_settings, session, gym, idp, platform_admin
):
    """The desk registered Pat and stored the national id, then removed Pat. Pat later joined
    through the public link with a login of their own; once the address was proven the link
    deleted the gym's ended membership (the target's, not active) and the national id with it.
    The login's active membership goes on; the ended one stays, whole, on the retired row, as
    a dropped membership does (decisions s41)."""
    profile_id = uuid.UUID(desk(keyed_client, gym, PAT).json["userId"])
    stored = keyed_client.put(
        f"/organizations/{gym.id}/members/{profile_id}/national-id",
        json={"nationalId": NATIONAL_ID},
        headers=gym[Role.owner].headers,
    )
    assert stored.status_code == 200
    removed = keyed_client.delete(
        f"/organizations/{gym.id}/members/{profile_id}", headers=gym[Role.owner].headers
    )
    assert removed.json["status"] == "cancelled"
    collected_on = held_by(session, gym, profile_id).id
    pat = signs_up_and_joins(session, idp, gym)

    me = proven_and_signed_in(keyed_client, platform_admin, pat)

    assert (me.status_code, me.json["user"]["id"]) == (200, str(profile_id))
    assert held_by(session, gym, profile_id).status is MembershipStatus.active  # demotes no one
    ended = session.get(Membership, collected_on)
    assert ended is not None, "the gym's ended membership was deleted, its national id with it"
    assert (ended.user_id, ended.status) == (pat.user.id, MembershipStatus.cancelled)
    assert national_id(keyed_settings, ended) == NATIONAL_ID  # the row kept its id


def test_a_link_never_lifts_a_suspension_the_gym_decided(client, session, gym, idp, platform_admin):
    """The gym suspended Pat's desk membership; Pat joined through the public link with a
    login of their own (a public link never lifts a suspension: it was another row). Once the
    address was proven the link deleted the suspended membership and kept the login's active
    one: the suspension was gone and Pat could book again."""
    profile_id = uuid.UUID(desk(client, gym, PAT).json["userId"])
    suspended = held_by(session, gym, profile_id)
    suspended.status = MembershipStatus.suspended
    session.commit()
    pat = signs_up_and_joins(session, idp, gym)

    me = proven_and_signed_in(client, platform_admin, pat)

    assert (me.status_code, me.json["user"]["id"]) == (200, str(profile_id))
    assert {m["organizationId"]: m["status"] for m in me.json["memberships"]} == {
        str(gym.id): "suspended"
    }
    goes_on = held_by(session, gym, profile_id)
    assert (goes_on.id, goes_on.status) == (suspended.id, MembershipStatus.suspended)
