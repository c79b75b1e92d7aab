"""A link request (an invitation row with profile_user_id: the person asked to link the gym's
profile, decisions s43) is none of the gym's invitations: revoking or resending it by id answers
404 invitation_not_found, exactly as an unknown id does, and changes nothing. Both routes took
it: a resend mailed the login again and answered `existingAccount: true`, which told the gym the
address has a login (spec A 3), and a revoke withdrew a request the gym may not see."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Role
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import signed_in

PAT = "pat@example.test"


@pytest.fixture
def link_request(client, session, idp, gym) -> Invitation:
    """Pat, a proven login, registered at the gym's desk: the gym's profile and a request that
    Pat link it, not yet emailed."""
    pat = signed_in(idp, session, identity_id="user_pat", email=PAT)
    session.commit()
    registered = client.post(
        f"/organizations/{gym.id}/members",
        json={"email": PAT, "name": "Pat"},
        headers=gym[Role.owner].headers,
    )
    assert registered.status_code == 201, registered.json
    return session.scalar(select(Invitation).where(Invitation.user_id == pat.user.id))


def _state(session, invitation_id) -> tuple:
    session.expire_all()
    row = session.get(Invitation, invitation_id)
    return (row.status, row.token_version, row.send_count, row.expires_at, row.revoked_at)


@pytest.mark.parametrize("action", ["revoke", "resend"])
def test_revoking_or_resending_a_link_request_answers_as_for_an_unknown_invitation(
    client, session, gym, mailbox, link_request, action
):
    assert link_request.profile_user_id is not None
    before = _state(session, link_request.id)

    def call(invitation_id):
        return client.post(
            f"/organizations/{gym.id}/invitations/{invitation_id}/{action}",
            headers=gym[Role.owner].headers,
        )

    known, unknown = call(link_request.id), call(uuid.uuid4())

    assert (known.status_code, known.json) == (unknown.status_code, unknown.json)
    assert (known.status_code, known.json["code"]) == (404, "invitation_not_found")
    assert _state(session, link_request.id) == before
    assert before[0] is InvitationStatus.pending
    assert read_mailbox(mailbox) == []
