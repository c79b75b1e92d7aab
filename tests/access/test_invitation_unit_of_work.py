"""One unit of work is one transaction: inviting never commits what its caller wrote before.

`create_invitation` commits its own invitation before the email when its caller's transaction
only read (decisions s42). A caller that wrote first (a command that seeds, then invites) keeps
its unit of work: the invitation joins the caller's transaction, and the caller's rollback
takes back the caller's rows with it, whether the email went out or was refused."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gymctl.access.invitations import Outreach, create_invitation
from gymctl.models import Invitation, Membership, Organization, Role
from gymctl.providers.mail import MailboxMailer, MailError
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


class _Refusing:
    def send(self, email):
        raise MailError("the mail server refused")


def _invite_after_a_write(session_factory, gym, outreach, email):
    """A caller renames the gym, then invites; the caller then rolls back."""
    with session_factory() as caller:
        organization = caller.get(Organization, gym.id)
        organization.name = "Renamed Before Inviting"
        caller.flush()
        try:
            return create_invitation(
                caller,
                outreach,
                organization=organization,
                actor=caller.get(Membership, gym[Role.owner].membership.id),
                actor_user_id=gym[Role.owner].user.id,
                email=email,
                role=Role.coach,
                now=NOW,
            )
        except Exception as error:
            return error
        finally:
            caller.rollback()


def test_a_caller_that_wrote_first_can_still_roll_back_after_a_refused_email(
    session_factory, session, settings, gym, idp
):
    outreach = Outreach(settings, _Refusing(), _identity_admin(settings, session_factory))
    refused = _invite_after_a_write(session_factory, gym, outreach, "new@example.test")

    assert getattr(refused, "code", None) == "mail_failed"
    session.expire_all()
    assert session.get(Organization, gym.id).name == "Iron Temple"
    assert session.scalar(select(func.count()).select_from(Invitation)) == 0


def test_a_caller_that_wrote_first_keeps_its_transaction_through_a_sent_invitation(
    session_factory, session, settings, gym, idp, tmp_path, clock
):
    mailer = MailboxMailer(tmp_path / "mailbox", settings.mail_from, clock=clock)
    outreach = Outreach(settings, mailer, _identity_admin(settings, session_factory))
    _invite_after_a_write(session_factory, gym, outreach, "new@example.test")

    session.expire_all()
    assert session.get(Organization, gym.id).name == "Iron Temple"
    assert session.scalar(select(func.count()).select_from(Invitation)) == 0


def _identity_admin(settings, session_factory):
    from gymctl.providers.identity_admin import identity_admin_from_settings

    return identity_admin_from_settings(settings, session_factory)
