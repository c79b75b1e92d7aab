"""A deleted login stays deleted whatever order the provider's deliveries arrive in (spec A 6.1:
user.deleted soft-deletes the database user). Deliveries are not ordered: a user.created that
failed is retried after the user.deleted that followed it. That late user.created found the
soft-deleted row, wrote the address back and auto-accepted the gym's pending staff invitation:
a deleted login held an active coach membership; a late user.updated rewrote its address."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import Invitation, InvitationStatus, Membership, Role, User
from tests import factories
from tests.api.test_identity_webhook import deliver, provider_user
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

ADDRESS = "coach.gone@example.test"


def _pending_staff_invitation(session):
    gym = factories.organization(session, name="Late Events Gym")
    invitation = Invitation(
        organization_id=gym.id,
        email=ADDRESS,
        role=Role.coach,
        expires_at=NOW + timedelta(days=14),
        created_at=NOW,
    )
    session.add(invitation)
    session.commit()
    return invitation


def _deleted(client):
    event = {"type": "user.deleted", "data": {"id": "user_gone", "deleted": True}}
    return deliver(client, event)


@pytest.mark.parametrize("row_first", [True, False], ids=["row-existed", "no-row-yet"])
def test_a_late_user_created_neither_revives_a_deleted_login_nor_accepts_for_it(
    client, session, engine, row_first
):
    invitation = _pending_staff_invitation(session)
    if row_first:  # GET /users/me made the row before any webhook
        factories.user(session, identity_id="user_gone", email=ADDRESS)
        session.commit()

    assert _deleted(client).status_code == 200
    late = deliver(client, {"type": "user.created", "data": provider_user("user_gone", ADDRESS)})

    assert late.status_code == 200
    session.expire_all()
    user = session.scalar(select(User).where(User.identity_id == "user_gone"))
    assert user.deleted_at is not None
    assert session.get(Invitation, invitation.id).status is InvitationStatus.pending
    assert session.scalar(select(Membership).where(Membership.user_id == user.id)) is None


def test_a_late_user_updated_leaves_a_deleted_login_as_it_was(client, session, engine):
    factories.user(session, identity_id="user_gone", email=ADDRESS)
    session.commit()

    assert _deleted(client).status_code == 200
    update = {"type": "user.updated", "data": provider_user("user_gone", "new@example.test")}
    assert deliver(client, update).status_code == 200

    session.expire_all()
    user = session.scalar(select(User).where(User.identity_id == "user_gone"))
    assert (user.email, user.deleted_at is not None) == (ADDRESS, True)
