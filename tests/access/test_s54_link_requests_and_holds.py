"""Only the person's consent links a gym's profile to their login, and a hold past its expiry is
not released (spec A 3, 5.3; decisions "Consent is a link request": "Signing in never links a
profile awaiting consent"). A hunt in s54 found two doors that accepted a desk's link request as
if it were an invitation: the /users/me that releases a held invitation after Mark email
verified (it took every pending invitation of the gym naming the login), and a late
`user.created` accepting on sign-up. Each folded the gym's profile into the login, soft-deleting
it. The same release accepted a held invitation ten minutes past its expiry, which accepting it
directly answers 410 and sign-up skips."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Membership, MembershipStatus, Role, User
from tests.access.conftest import signed_in
from tests.api.test_identity_webhook import deliver
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

ADDRESS = "maybe@example.test"


def _headers(idp, identity_id, at):
    return {"Authorization": f"Bearer {idp.token(identity_id, now=at)}"}


def _held_coach_invitation(client, gym, session, idp):
    """A coach invitation held for a login whose address is not proven yet."""
    unproven = signed_in(idp, session, identity_id="user_unproven", email=ADDRESS, verified=False)
    session.commit()
    idp.add_account("user_unproven", ADDRESS, verified=False)
    invited = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": ADDRESS, "role": "coach"},
        headers=gym[Role.owner].headers,
    )
    assert invited.status_code == 201, invited.json
    return unproven


def _desk_registers(client, gym, session, address) -> Invitation:
    """The desk registers the login's address: a profile of the gym's and a link request."""
    desk = client.post(
        f"/organizations/{gym.id}/members",
        json={"email": address, "name": "Maybe"},
        headers=gym[Role.owner].headers,
    )
    assert desk.status_code in (200, 201), desk.json
    session.expire_all()
    link_request = session.scalar(select(Invitation).where(Invitation.profile_user_id.is_not(None)))
    assert link_request.status is InvitationStatus.pending
    return link_request


def _still_awaiting_consent(session, link_request) -> None:
    session.expire_all()
    link_request = session.get(Invitation, link_request.id)
    assert link_request.status is InvitationStatus.pending
    assert session.get(User, link_request.profile_user_id).deleted_at is None


def test_releasing_a_held_invitation_does_not_accept_a_link_request(
    client, gym, session, idp, platform_admin
):
    unproven = _held_coach_invitation(client, gym, session, idp)
    marked = client.post(
        f"/admin/users/{unproven.user.id}/mark-email-verified", headers=platform_admin.headers
    )
    assert marked.status_code == 200, marked.json
    link_request = _desk_registers(client, gym, session, ADDRESS)

    assert client.get("/users/me", headers=unproven.headers).status_code == 200

    _still_awaiting_consent(session, link_request)
    membership = session.scalar(select(Membership).where(Membership.user_id == unproven.user.id))
    assert membership.status is MembershipStatus.active  # the held invitation itself: released


def test_a_late_user_created_does_not_accept_a_link_request(client, gym, session, idp):
    data = idp.add_account("user_late", "late@example.test", verified=True)
    # The webhook is late: the login's first /users/me makes its row.
    assert client.get("/users/me", headers=_headers(idp, "user_late", NOW)).status_code == 200
    link_request = _desk_registers(client, gym, session, "late@example.test")

    assert deliver(client, {"type": "user.created", "data": data}).status_code == 200

    _still_awaiting_consent(session, link_request)


def test_a_held_invitation_past_its_expiry_is_not_released(
    client, gym, session, idp, clock, platform_admin
):
    unproven = _held_coach_invitation(client, gym, session, idp)
    invitation = session.scalar(select(Invitation).where(Invitation.email == ADDRESS))
    later = invitation.expires_at + timedelta(minutes=10)  # before the hourly sweep ran
    clock.set(later)
    marked = client.post(
        f"/admin/users/{unproven.user.id}/mark-email-verified",
        headers=_headers(idp, "user_ops", later),
    )
    assert marked.status_code == 200, marked.json

    assert client.get("/users/me", headers=_headers(idp, "user_unproven", later)).status_code == 200

    session.expire_all()
    assert session.get(Invitation, invitation.id).status is InvitationStatus.pending  # the sweep's
    membership = session.scalar(select(Membership).where(Membership.user_id == unproven.user.id))
    assert membership.status is MembershipStatus.pending_invitation
