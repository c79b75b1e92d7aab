"""One person's two rows folded into one (access.folding, spec A 5.3): the gym's pending
invitation of the person is about the person, who stays the gym's member, not about the
membership the fold ends: it still stands, and accepting it reaches the membership that goes
on, never the ended one on the retired row."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Membership, MembershipStatus, Role
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import signed_in
from tests.access.test_email_ownership import desk
from tests.access.test_invitations import invite, link_in

pytestmark = pytest.mark.embedded

PAT = "pat@example.test"


def test_a_staff_invitation_outlives_the_membership_a_link_ends(
    client, session, gym, idp, platform_admin, mailbox
):
    """The desk registered Pat; Pat signed up (unproven) and the gym invited the address as a
    coach, held on the login's pending membership. The link at the next /users/me ends that
    membership; the invitation is still the gym's wish: accepted, the person is the gym's
    coach on the membership that goes on, and the ended one stays ended."""
    profile_id = uuid.UUID(desk(client, gym, PAT).json["userId"])
    pat = signed_in(idp, session, identity_id="user_pat", email=PAT, verified=False)
    session.commit()
    idp.add_account("user_pat", PAT, verified=False)
    assert invite(client, gym, PAT, role="coach").status_code == 201
    held = session.scalar(select(Membership).where(Membership.user_id == pat.user.id))
    client.post("/admin/users/user_pat/mark-email-verified", headers=platform_admin.headers)
    assert client.get("/users/me", headers=pat.headers).json["user"]["id"] == str(profile_id)
    session.expire_all()
    assert session.get(Membership, held.id).status is MembershipStatus.cancelled
    invitation = session.scalar(select(Invitation).where(Invitation.email == PAT))
    assert (invitation.status, invitation.user_id) == (InvitationStatus.pending, profile_id)

    token, _ = link_in(read_mailbox(mailbox)[-1], "token")
    accepted = client.post("/invitations/accept", json={"token": token}, headers=pat.headers)

    assert accepted.status_code == 200, accepted.json
    session.expire_all()
    rows = session.execute(
        select(Membership.id, Membership.role, Membership.status).where(
            Membership.organization_id == gym.id,
            Membership.user_id.in_((profile_id, pat.user.id)),
        )
    ).all()
    assert {(row.id == held.id, row.role, row.status) for row in rows} == {
        (True, Role.coach, MembershipStatus.cancelled),  # the ended one, on the retired row
        (False, Role.coach, MembershipStatus.active),  # the one that goes on
    }
