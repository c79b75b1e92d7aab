"""An owner grant opened from its email stays claimable (spec A 7,
OWNER_INVITATION_REQUIRED: gym creation needs a claimable owner grant)."""

from __future__ import annotations

import uuid

import pytest

from gymctl.models import Invitation, InvitationStatus
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import signed_in
from tests.access.test_invitations import link_in

pytestmark = pytest.mark.embedded

FUTURE_OWNER = "future.owner@example.test"


def test_accepting_an_owner_grant_from_its_email_leaves_it_claimable_by_gym_creation(
    client, session, idp, mailbox, platform_admin, engine
):
    """The grant's email to an existing account links to /invitations/accept; the app posts
    its token there. That consumed the grant (accepted, no gym), so creating the gym answered
    403 OWNER_INVITATION_REQUIRED for ever: the owner's only way in was closed by the link
    the platform sent."""
    idp.add_account("user_future", FUTURE_OWNER, verified=True)
    future_owner = signed_in(idp, session, identity_id="user_future", email=FUTURE_OWNER)
    session.commit()
    sent = client.post(
        "/admin/owner-grants", json={"email": FUTURE_OWNER}, headers=platform_admin.headers
    )
    assert sent.status_code == 201, sent.json
    [message] = [m for m in read_mailbox(mailbox) if m["To"] == FUTURE_OWNER]
    token, _url = link_in(message, "token")

    opened = client.post("/invitations/accept", json={"token": token}, headers=future_owner.headers)
    assert opened.status_code < 500, opened.json

    created = client.post(
        "/organizations",
        json={"name": "Granite Gym", "slug": "granite-gym"},
        headers=future_owner.headers,
    )
    assert created.status_code == 201, created.json
    session.expire_all()
    grant = session.get(Invitation, uuid.UUID(sent.json["id"]))
    assert grant.status is InvitationStatus.accepted
    assert str(grant.organization_id) == created.json["id"]
