"""s55 (a hunter's test): a deleted login is still asked to link a gym's profile.

Spec A 6.1: user.deleted "soft-delete[s] the database user"; decisions s46: "A membership's end
revokes the gym's pending invitations of the person (staff removal, erasure, `user.deleted`)";
decisions s41 (folding): "only the person's consent (accepting the link request) links it".
A deleted login can never accept (401 user_deleted), so its link request must not stay pending
and must not be emailed by the `link_requests` sweep.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Role
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import links_sent, signed_in
from tests.api.test_identity_webhook import deliver

pytestmark = pytest.mark.embedded

ADDRESS = "leaving@example.test"


def test_a_link_request_to_a_login_deleted_before_its_email_is_neither_pending_nor_sent(
    client, gym, session, idp, mailbox
):
    login = signed_in(idp, session, identity_id="user_leaving", email=ADDRESS)
    session.commit()
    idp.add_account("user_leaving", ADDRESS, verified=True)
    desk = client.post(
        f"/organizations/{gym.id}/members",
        json={"email": ADDRESS, "name": "Leaving"},
        headers=gym[Role.owner].headers,
    )
    assert desk.status_code in (200, 201), desk.json
    link_request = session.scalar(select(Invitation).where(Invitation.user_id == login.user.id))
    assert link_request is not None
    assert link_request.profile_user_id is not None

    deleted = deliver(client, {"type": "user.deleted",
                               "data": {"id": "user_leaving", "deleted": True}})  # fmt: skip
    assert deleted.status_code == 200, deleted.json

    sent = links_sent(client)
    session.expire_all()
    link_request = session.get(Invitation, link_request.id)
    assert sent["sent"] == 0, sent
    assert read_mailbox(mailbox) == []
    assert link_request.status is not InvitationStatus.pending
