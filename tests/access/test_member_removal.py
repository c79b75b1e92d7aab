"""Removing a member whose staff invitation is still pending (spec A 2.3, 2.4, 3): the removal
stands. The invitation that made the pending_invitation membership is revoked with it, so its
email's link can no longer bring the person back."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Membership, MembershipStatus, Role, User
from gymctl.providers.mail import read_mailbox
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def _accept_token(mailbox) -> str:
    [message] = read_mailbox(mailbox)
    body = message.get_body(("plain",)).get_content()
    url = next(word for word in body.split() if word.startswith("https://"))
    return parse_qs(urlparse(url).query)["token"][0]


@pytest.mark.parametrize(("by", "role"), [(Role.owner, "coach"), (Role.admin, "member")])
def test_a_removed_invitee_cannot_come_back_through_the_pending_invitation(
    client, gym, session, mailbox, idp, by, role
):
    idp.add_account("user_invitee", "invitee@example.test", verified=True)
    invited = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "invitee@example.test", "role": role},
        headers=gym[by].headers,
    )
    assert invited.status_code == 201, invited.json
    invitee = session.scalar(select(User).where(User.identity_id == "user_invitee"))
    token = _accept_token(mailbox)

    removed = client.delete(
        f"/organizations/{gym.id}/members/{invitee.id}", headers=gym[by].headers
    )

    assert (removed.status_code, removed.json["status"]) == (200, "cancelled")
    session.expire_all()
    invitation = session.get(Invitation, uuid.UUID(invited.json["id"]))
    assert invitation.status is InvitationStatus.revoked
    listed = client.get(f"/organizations/{gym.id}/invitations", headers=gym[by].headers).json
    assert [i["status"] for i in listed["invitations"]] == ["revoked"]

    accepted = client.post(
        "/invitations/accept",
        json={"token": token},
        headers={"Authorization": f"Bearer {idp.token('user_invitee', now=NOW)}"},
    )

    assert (accepted.status_code, accepted.json["code"]) == (409, "invitation_not_pending")
    session.expire_all()
    membership = session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == invitee.id
        )
    )
    assert membership.status is MembershipStatus.cancelled
