"""Erasure after one person's two rows were folded (access.folding + access.erasure).

decisions: "Personal-data erasure ... Erased from this gym: the membership (cancelled) and
... The person's row (address, name, avatar, national id) is erased"; and the fold keeps the
dropped membership "on the retired row with what the gym collected on it (its national id ...),
as erasure keeps it". So the gym's ended membership of the person sits on the retired row after a
link, and the owner's later erasure of the person must reach it: otherwise the national id the
gym collected survives the erasure."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.models import Membership, Role, User
from tests.access import test_national_id as national
from tests.access.test_email_ownership import desk
from tests.access.test_fold_memberships import (
    PAT,
    held_by,
    proven_and_signed_in,
    signs_up_and_joins,
)

pytestmark = pytest.mark.embedded

NATIONAL_ID = national.NATIONAL_ID
keyed_settings = national.keyed_settings
keyed_client = national.keyed_client


def test_erasure_reaches_the_national_id_left_on_the_retired_rows_membership(
    keyed_client, keyed_settings, session, gym, idp, platform_admin
):
    owner = gym[Role.owner].headers
    profile_id = uuid.UUID(desk(keyed_client, gym, PAT).json["userId"])
    stored = keyed_client.put(
        f"/organizations/{gym.id}/members/{profile_id}/national-id",
        json={"nationalId": NATIONAL_ID},
        headers=owner,
    )
    assert stored.status_code == 200
    removed = keyed_client.delete(f"/organizations/{gym.id}/members/{profile_id}", headers=owner)
    assert removed.json["status"] == "cancelled"
    collected_on = held_by(session, gym, profile_id).id
    pat = signs_up_and_joins(session, idp, gym)
    me = proven_and_signed_in(keyed_client, platform_admin, pat)
    assert me.json["user"]["id"] == str(profile_id)

    erased = keyed_client.post(
        f"/organizations/{gym.id}/members/{profile_id}/erasure", headers=owner
    )
    assert erased.status_code == 200, erased.json

    session.expire_all()
    leftovers = session.scalars(
        select(Membership).where(
            Membership.organization_id == gym.id,
            Membership.national_id_ciphertext.is_not(None),
        )
    ).all()
    assert [m.id for m in leftovers] == [], (
        "the gym's ended membership of the erased person (moved to the retired row by the "
        f"link, id {collected_on}) still holds the national id the gym collected"
    )


def test_erasure_reaches_the_gyms_profile_retired_by_a_consented_link(
    client, settings, session, gym, idp
):
    """The desk registered a proven login's address: the gym's profile (the name the desk
    typed) and a link request. The person accepted: the profile's membership became the
    login's and the profile was retired (soft-deleted, its name and address kept). The owner
    then erased the person: the gym's own profile row, which only this gym ever made, still
    carries the name and address the desk typed."""
    from urllib.parse import parse_qs, urlparse

    from gymctl.access.invitations import _links
    from gymctl.models import Invitation
    from tests.conftest import NOW
    from tests.factories import signed_in

    pat = signed_in(idp, session, identity_id="user_pat", email=PAT)
    session.commit()
    registered = client.post(
        f"/organizations/{gym.id}/members",
        json={"email": PAT, "name": "Patricia Desk-Typed"},
        headers=gym[Role.owner].headers,
    )
    assert registered.status_code == 201, registered.json
    profile_id = uuid.UUID(registered.json["userId"])
    invitation = session.scalar(select(Invitation).where(Invitation.profile_user_id == profile_id))
    token = parse_qs(urlparse(_links(settings, invitation, NOW)["accept"]).query)["token"][0]
    accepted = client.post("/invitations/accept", json={"token": token}, headers=pat.headers)
    assert accepted.status_code == 200, accepted.json
    session.expire_all()
    assert session.get(User, profile_id).deleted_at is not None  # retired by the link

    erased = client.post(
        f"/organizations/{gym.id}/members/{pat.user.id}/erasure", headers=gym[Role.owner].headers
    )
    assert erased.status_code == 200, erased.json

    session.expire_all()
    profile = session.get(User, profile_id)
    assert (profile.name, profile.email) == (None, None), (
        "the gym's retired profile of the erased person keeps the name and address it typed"
    )
