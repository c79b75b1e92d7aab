"""An invitation from a gym whose name holds a line break is sent, its subject on one line. The
gym's name may hold one (the routes refuse only NUL; decisions s46), and the invitation's
subject carried it as typed: `email.message` refused the header, the route answered 500 and the
invitation stayed pending and unsent, every resend failing the same way (a hunt in s54)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, Organization, Role
from gymctl.providers.mail import read_mailbox

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize("name", ["North\rside", "North\nside", "North\u2028side"])
def test_an_invitation_from_a_gym_whose_name_holds_a_line_break_is_sent(
    client, gym, session, mailbox, name
):
    session.get(Organization, gym.id).name = name
    session.commit()

    response = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "new@example.test", "role": "member"},
        headers=gym[Role.owner].headers,
    )

    assert response.status_code == 201, response.json
    [sent] = read_mailbox(mailbox)
    assert sent["Subject"] == "You're invited to join North side"
    assert session.scalar(select(Invitation.send_count)) == 1
