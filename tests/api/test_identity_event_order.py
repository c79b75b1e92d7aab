"""A join-ticket login stays unproven whatever order the provider's events arrive in
(spec A 5.3: "A login created from a join link handed to the browser has an unproven email";
a staff invitation to such an account is held)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Membership, Role, User
from tests import factories
from tests.access.test_join import make_link
from tests.api.test_identity_webhook import deliver, provider_user
from tests.api.test_sign_up_origin import _join_ticket
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

ADDRESS = "coach.to.be@example.test"


def test_user_updated_before_user_created_leaves_a_join_ticket_login_unproven(
    client, session, settings, engine
):
    """The provider's deliveries are not ordered (a user.created that failed is retried after
    the user.updated that followed it). user.updated made the row from the provider's verified
    flag alone, ignoring the join ticket in the same user object: the login was proven, and the
    user.created after it auto-accepted the gym's pending coach invitation to that address."""
    gym = factories.organization(session, name="Join Gym")
    link = make_link(session, gym)
    staff_invitation = Invitation(
        organization_id=gym.id,
        email=ADDRESS,
        role=Role.coach,
        expires_at=NOW + timedelta(days=14),
        created_at=NOW,
    )
    session.add(staff_invitation)
    session.commit()
    data = provider_user("user_joiner", ADDRESS, verified=True)
    data["unsafe_metadata"] = {"joinTicket": _join_ticket(settings, gym, link.id, ADDRESS)}

    assert deliver(client, {"type": "user.updated", "data": data}).status_code == 200
    assert deliver(client, {"type": "user.created", "data": data}).status_code == 200

    session.expire_all()
    user = session.scalar(select(User).where(User.identity_id == "user_joiner"))
    assert user.email_verified_at is None
    assert (user.signup_origin, user.signup_join_link_id) == ("join_link", link.id)
    assert session.get(Invitation, staff_invitation.id).status is InvitationStatus.pending
    membership = session.scalar(select(Membership).where(Membership.user_id == user.id))
    assert membership is not None
    assert membership.invitation_held is True
