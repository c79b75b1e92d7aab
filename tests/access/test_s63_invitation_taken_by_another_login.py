# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
"""An invitation taken by another login than the one invited ends the invited login's pending
membership (spec A 3: an invitation to an existing account makes a pending_invitation membership
at once, which lives and ends with the pending invitation). A hunt in s63 found it left pending
for good when the invited login changed its address and the address's new holder signed up
and took the invitation: no revoke or expiry reaches an accepted invitation."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Membership, MembershipStatus, User
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.access.test_invitations import invite
from tests.api.test_identity_webhook import deliver, provider_user

pytestmark = pytest.mark.embedded


def test_an_invitation_taken_by_the_address_new_holder_leaves_no_pending_membership_behind(
    client, gym, session, mailbox, idp
):
    """Spec A 3: an invitation to an existing account makes a pending_invitation membership at
    once; the invitation then leaves `pending` (accepted). The invited login changed its address
    and the address's new holder signed up and took the invitation (user.created): the first
    login's pending_invitation membership is left pending with no pending invitation behind
    it, and nothing (revoke, expiry) can ever end it."""
    idp.add_account("user_first", "shared@example.test", verified=True)
    created = invite(client, gym, "shared@example.test", role="coach")
    assert created.status_code == 201, created.json
    first = session.scalar(select(User).where(User.identity_id == "user_first"))
    moved = deliver(
        client,
        {"type": "user.updated", "data": provider_user("user_first", "elsewhere@example.test")},
    )
    assert moved.status_code == 200, moved.json
    taken = deliver(
        client,
        {"type": "user.created", "data": provider_user("user_second", "shared@example.test")},
    )
    assert taken.status_code == 200, taken.json
    session.expire_all()
    invitation = session.get(Invitation, uuid.UUID(created.json["id"]))
    assert invitation.status is InvitationStatus.accepted
    left = session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == first.id
        )
    )
    assert (left.status, left.invitation_held) == (MembershipStatus.cancelled, False)
    second = session.scalar(select(User).where(User.identity_id == "user_second"))
    taker = session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id, Membership.user_id == second.id
        )
    )
    assert (taker.status, taker.role.value) == (MembershipStatus.active, "coach")
