"""An invitation ends once: accepted or revoked, never both (spec A 3: pending -> accepted,
pending -> revoked). A revoke and an accept at once on PostgreSQL each read it pending; the
later one must see what the first decided, not write over it: a staff role the owner revoked
(answered 200) was then held by the invitee as an active membership."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from gymctl.access import invitations
from gymctl.access.invitations import Outreach, create_invitation
from gymctl.db import get_engine, session_factory
from gymctl.models import Invitation, InvitationStatus, Membership, MembershipStatus, Role, User
from gymctl.providers.identity_admin import identity_admin_from_settings
from gymctl.providers.mail import MailboxMailer
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait


@pytest.fixture
def committed(committed_pg, settings, idp, tmp_path, clock):
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = factories.make_gym(session, roles=(Role.owner,), idp=idp)
        factories.signed_in(idp, session, identity_id="user_invitee", email="invitee@example.test")
        session.commit()
    idp.add_account("user_invitee", "invitee@example.test", verified=True)
    mailer = MailboxMailer(tmp_path / "mailbox", settings.mail_from, clock=clock)
    outreach = Outreach(settings, mailer, identity_admin_from_settings(settings, factory))
    with factory() as session:
        invitation = create_invitation(
            session,
            outreach,
            organization=gym.organization,
            actor=session.get(Membership, gym[Role.owner].membership.id),
            actor_user_id=gym[Role.owner].user.id,
            email="invitee@example.test",
            role=Role.admin,
            now=NOW,
        )
        session.commit()
        token = invitations._token(
            settings, invitation.id, invitation.expires_at, invitation.token_version, NOW
        )
    return factory, gym, invitation.id, token


def test_an_accept_while_a_revoke_commits_sees_it_revoked(committed, settings, committed_pg):
    factory, gym, invitation_id, ticket = committed
    answers: list[str] = []

    def accept():
        with factory() as session:
            user = session.scalar(select(User).where(User.identity_id == "user_invitee"))
            try:
                invitations.accept_invitation(session, settings, user, ticket, now=NOW)
                session.commit()
                answers.append("accepted")
            except Exception as error:
                answers.append(getattr(error, "code", repr(error)))

    with factory() as revoking:
        owner = revoking.get(Membership, gym[Role.owner].membership.id)
        invitations.revoke_invitation(revoking, owner, invitation_id, now=NOW)
        revoking.flush()  # the revoke holds the row; the accept comes now
        thread = threading.Thread(target=accept)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        revoking.commit()
    thread.join(timeout=30)

    with factory() as session:
        invitation = session.get(Invitation, invitation_id)
        membership = session.scalar(
            select(Membership).where(
                Membership.organization_id == gym.id,
                Membership.user_id == invitation.user_id,
            )
        )
        assert answers == ["invitation_not_pending"]
        assert invitation.status is InvitationStatus.revoked
        assert membership.status is MembershipStatus.cancelled


def test_a_revoke_while_an_accept_commits_sees_it_accepted(committed, settings, committed_pg):
    factory, gym, invitation_id, ticket = committed
    answers: list[str] = []

    def revoke():
        with factory() as session:
            owner = session.get(Membership, gym[Role.owner].membership.id)
            try:
                invitations.revoke_invitation(session, owner, invitation_id, now=NOW)
                session.commit()
                answers.append("revoked")
            except Exception as error:
                answers.append(getattr(error, "code", repr(error)))

    with factory() as accepting:
        user = accepting.scalar(select(User).where(User.identity_id == "user_invitee"))
        invitations.accept_invitation(accepting, settings, user, ticket, now=NOW)
        accepting.flush()
        thread = threading.Thread(target=revoke)
        thread.start()
        wait_for_a_lock_wait(get_engine(committed_pg))
        accepting.commit()
    thread.join(timeout=30)

    with factory() as session:
        invitation = session.get(Invitation, invitation_id)
        membership = session.scalar(
            select(Membership).where(
                Membership.organization_id == gym.id,
                Membership.user_id == invitation.user_id,
            )
        )
        assert answers == ["invitation_not_pending"]
        assert invitation.status is InvitationStatus.accepted
        assert (membership.status, membership.role) == (MembershipStatus.active, Role.admin)
