"""A signed-in person with a staff invitation still pending (not held) joins through the gym's
public link first (spec A 2.4, 2.8, 2.9, 3). The link makes them a member, as it makes anyone;
the invitation stays theirs to accept, and accepting it ("Invitation | pending | user accepts in
the app | existing account | accepted") gives the role the staff granted. An accepted invitation
never lowers a role."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, JoinLink, Membership, MembershipStatus, Role
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import signed_in
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


@pytest.fixture
def link(session, gym) -> JoinLink:
    row = JoinLink(organization_id=gym.id, token=uuid.uuid4().hex, created_at=NOW)
    session.add(row)
    session.commit()
    return row


def _accept_token(mailbox) -> str:
    [message] = read_mailbox(mailbox)
    body = message.get_body(("plain",)).get_content()
    url = next(word for word in body.split() if word.startswith("https://"))
    return parse_qs(urlparse(url).query)["token"][0]


def _membership(session, gym, user) -> Membership:
    session.expire_all()
    return session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == user.id
        )
    )


@pytest.mark.parametrize("role", [Role.coach, Role.admin])
def test_accepting_a_staff_invitation_after_joining_through_a_link_gives_the_invited_role(
    client, gym, session, mailbox, idp, link, role
):
    person = signed_in(idp, session, identity_id="user_trainer", email="trainer@example.test")
    session.commit()
    idp.add_account("user_trainer", "trainer@example.test", verified=True)
    invited = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "trainer@example.test", "role": role.value},
        headers=gym[Role.owner].headers,
    )
    assert invited.status_code == 201, invited.json
    token = _accept_token(mailbox)

    joined = client.post(f"/join/{link.token}/join", headers=person.headers)

    assert (joined.status_code, joined.json["role"], joined.json["status"]) == (
        201,
        "member",
        "active",
    )

    accepted = client.post("/invitations/accept", json={"token": token}, headers=person.headers)

    assert (accepted.status_code, accepted.json["status"]) == (200, "accepted")
    membership = _membership(session, gym, person.user)
    assert (membership.role, membership.status) == (role, MembershipStatus.active)
    invitation = session.get(Invitation, uuid.UUID(invited.json["id"]))
    assert invitation.status is InvitationStatus.accepted
    roster = client.get(f"/organizations/{gym.id}/members", headers=gym[Role.owner].headers).json
    [shown] = [m for m in roster["members"] if m["userId"] == str(person.user.id)]
    assert (shown["role"], shown["status"]) == (role.value, "active")


def test_accepting_a_member_invitation_never_lowers_a_staff_role(
    client, gym, session, mailbox, idp, link
):
    person = signed_in(idp, session, identity_id="user_regular", email="regular@example.test")
    session.commit()
    idp.add_account("user_regular", "regular@example.test", verified=True)
    invited = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "regular@example.test", "role": "member"},
        headers=gym[Role.owner].headers,
    )
    assert invited.status_code == 201, invited.json
    token = _accept_token(mailbox)
    assert client.post(f"/join/{link.token}/join", headers=person.headers).status_code == 201
    promoted = client.patch(
        f"/organizations/{gym.id}/members/{person.user.id}",
        json={"role": "coach"},
        headers=gym[Role.owner].headers,
    )
    assert promoted.status_code == 200, promoted.json

    accepted = client.post("/invitations/accept", json={"token": token}, headers=person.headers)

    assert accepted.status_code == 200
    membership = _membership(session, gym, person.user)
    assert (membership.role, membership.status) == (Role.coach, MembershipStatus.active)
