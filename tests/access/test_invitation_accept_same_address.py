"""Accepting in the app reads the invitee's address by the rule every lookup uses
(`same_address`, the database's lower()): the app takes an invitation exactly when signing up
would. It compared with Python's str.lower(), which folds 'É' where SQLite's lower() does not:
on the embedded default a login 'Élodie@x.test' accepted the invitation to 'élodie@x.test' in
the app that its sign-up did not find."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.access import invitations
from gymctl.access.invitations import accept_invitation, accept_on_sign_up
from gymctl.errors import DomainError
from gymctl.models import Invitation, InvitationStatus, Role
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_the_app_accepts_an_invitation_exactly_when_sign_up_would(engine, session, settings):
    gym = factories.organization(session)
    invitation = Invitation(
        organization_id=gym.id,
        email="élodie@x.test",
        role=Role.member,
        expires_at=NOW + timedelta(days=14),
        created_at=NOW,
    )
    session.add(invitation)
    login = factories.user(session, email="Élodie@x.test", email_verified_at=NOW)
    with session.begin_nested() as trial:
        by_sign_up = accept_on_sign_up(session, login, now=NOW) == 1
        trial.rollback()
    session.expire_all()
    token = invitations._token(
        settings, invitation.id, invitation.expires_at, invitation.token_version, NOW
    )

    try:
        accept_invitation(session, settings, login, token, now=NOW)
        answer = "accepted"
    except DomainError as refused:
        answer = f"{refused.status} {refused.code}"

    assert answer == ("accepted" if by_sign_up else "403 invitation_other_address")
    expected = InvitationStatus.accepted if by_sign_up else InvitationStatus.pending
    assert session.get(Invitation, invitation.id).status is expected
