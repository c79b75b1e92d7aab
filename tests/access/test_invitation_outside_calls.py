"""Invitations ask the identity provider and the mail server with no write lock held (decisions
s41/s42): the checks read, the provider is asked, the checks run again on fresh rows and the
invitation is stored and committed, then its email goes out. What that order must keep: a double
click or a second admin still ends with one invitation and one email; a refused email keeps
nothing once the refusal is answered; a refused resend keeps the older link; an invitation
stored whose email never went out (a crash between the two) is sent by a resend."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import select

from gymctl.access import bulk_invitations
from gymctl.access.invitations import Outreach, create_invitation
from gymctl.models import (
    AuditLog,
    Invitation,
    InvitationBatch,
    InvitationStatus,
    Membership,
    MembershipStatus,
    Organization,
    Role,
    User,
)
from gymctl.providers.mail import read_mailbox
from tests.access.test_invitations import count, invite, link_in
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def _outreach(app) -> Outreach:
    return app.extensions["gymctl"].outreach


def _broken_mail_app(settings, session_factory, clock):
    from gymctl.providers.mail import SmtpMailer
    from webhooks.app import create_app

    mailer = SmtpMailer("smtp://127.0.0.1:1", settings.mail_from)
    return create_app(settings, session_factory=session_factory, clock=clock, mailer=mailer)


def _aside(meanwhile):
    """`meanwhile`'s answer, run in a thread of its own (a second request: a nested one in
    this thread would share the first one's Flask `g`, and so its session)."""
    answers = []
    thread = threading.Thread(target=lambda: answers.append(meanwhile()))
    thread.start()
    thread.join(timeout=60)
    assert answers, "the second request did not finish"
    return answers[0]


def _while_looking_up(monkeypatch, app, meanwhile):
    """Run `meanwhile` (once) while the identity provider answers the first lookup."""
    admin = _outreach(app).identity_admin
    lookup, ran = admin.find_account, []

    def looked_up(email, keys):
        if not ran:
            ran.append(None)  # `meanwhile` looks up too: it is not run again
            ran[0] = _aside(meanwhile)
        return lookup(email, keys)

    monkeypatch.setattr(admin, "find_account", looked_up)
    return ran


def test_a_second_admin_while_the_first_email_is_sent_is_told_it_is_pending(
    app, client, gym, session, mailbox, idp, monkeypatch
):
    """The invitation is committed before its email: a second admin meanwhile sees it."""
    mailer, answers = _outreach(app).mailer, []
    send = mailer.send

    def sending(message):
        if not answers:
            answers.append(None)
            answers[0] = _aside(lambda: invite(client, gym, "both@example.test", by=Role.admin))
        return send(message)

    monkeypatch.setattr(mailer, "send", sending)

    first = invite(client, gym, "both@example.test")

    assert (first.status_code, first.json["sendCount"]) == (201, 1)
    assert (answers[0].status_code, answers[0].json["code"]) == (409, "invitation_pending")
    assert count(session, Invitation) == 1
    assert len(read_mailbox(mailbox)) == 1


def test_a_refused_email_to_a_login_keeps_no_invitation_membership_or_audit(
    settings, session_factory, clock, client, gym, session, idp
):
    """Stored before its email, the invitation is withdrawn when the mail server refuses it:
    it keeps nothing once the 502 is answered (its pending membership and audit come with its
    first email), and the address can be invited again."""
    idp.add_account("user_known", "known@example.test", verified=True)
    broken = _broken_mail_app(settings, session_factory, clock).test_client()

    refused = invite(broken, gym, "known@example.test", role="coach")

    assert (refused.status_code, refused.json["code"]) == (502, "mail_failed")
    session.expire_all()
    known = session.scalar(select(User).where(User.identity_id == "user_known"))
    assert count(session, Invitation) == 0
    assert count(session, Membership, Membership.user_id == known.id) == 0
    assert count(session, AuditLog, AuditLog.action == "invitation.created") == 0
    again = invite(client, gym, "known@example.test", role="coach")
    assert again.status_code == 201
    membership = session.scalar(select(Membership).where(Membership.user_id == known.id))
    assert (membership.status, membership.role) == (MembershipStatus.pending_invitation, Role.coach)


def test_a_refused_resend_keeps_the_older_link_working(
    settings, session_factory, clock, client, gym, session, mailbox, idp
):
    """The new token's version is committed before its email; a refused email puts the
    former version and expiry back, so the link already sent still accepts."""
    idp.add_account("user_known", "known@example.test")
    created = invite(client, gym, "known@example.test").json
    old_token, _ = link_in(read_mailbox(mailbox)[0], "token")
    broken = _broken_mail_app(settings, session_factory, clock).test_client()

    refused = broken.post(
        f"/organizations/{gym.id}/invitations/{created['id']}/resend",
        headers=gym[Role.owner].headers,
    )

    assert (refused.status_code, refused.json["code"]) == (502, "mail_failed")
    session.expire_all()
    invitation = session.get(Invitation, uuid.UUID(created["id"]))
    assert (invitation.token_version, invitation.expires_at.isoformat()) == (
        1,
        created["expiresAt"],
    )
    accepted = client.post(
        "/invitations/accept",
        json={"token": old_token},
        headers={"Authorization": f"Bearer {idp.token('user_known', now=NOW)}"},
    )
    assert (accepted.status_code, accepted.json["status"]) == (200, "accepted")


class _Killed:
    """A mailer whose process dies in the middle of the send."""

    def send(self, message):
        raise RuntimeError("the process was killed")


def test_an_invitation_stored_but_never_emailed_is_sent_by_a_resend(
    app, client, gym, session, session_factory, settings, mailbox, idp
):
    """A crash between the invitation's commit and its email leaves it pending and unsent
    (sendCount 0): inviting again answers invitation_pending, and a resend sends it and
    completes it (the login's pending membership)."""
    idp.add_account("user_known", "known@example.test", verified=True)
    killed = Outreach(settings, _Killed(), _outreach(app).identity_admin)
    with session_factory() as crashing, pytest.raises(RuntimeError):
        create_invitation(
            crashing,
            killed,
            organization=crashing.get(Organization, gym.id),
            actor=crashing.get(Membership, gym[Role.owner].membership.id),
            actor_user_id=gym[Role.owner].user.id,
            email="known@example.test",
            role=Role.coach,
            now=NOW,
        )
    session.expire_all()
    [stored] = session.scalars(select(Invitation)).all()
    assert (stored.status, stored.send_count) == (InvitationStatus.pending, 0)
    assert count(session, Membership, Membership.user_id == stored.user_id) == 0

    again = invite(client, gym, "known@example.test", role="coach")
    assert (again.status_code, again.json["code"]) == (409, "invitation_pending")
    resent = client.post(
        f"/organizations/{gym.id}/invitations/{stored.id}/resend", headers=gym[Role.owner].headers
    )

    assert (resent.status_code, resent.json["sendCount"]) == (200, 1)
    membership = session.scalar(select(Membership).where(Membership.user_id == stored.user_id))
    assert (membership.status, membership.role) == (MembershipStatus.pending_invitation, Role.coach)
    assert count(session, AuditLog, AuditLog.action == "invitation.created") == 1
    token, _ = link_in(read_mailbox(mailbox)[0], "token")
    accepted = client.post(
        "/invitations/accept",
        json={"token": token},
        headers={"Authorization": f"Bearer {idp.token('user_known', now=NOW)}"},
    )
    assert accepted.status_code == 200


def _queue(client, gym, emails):
    response = client.post(
        f"/organizations/{gym.id}/invitations/bulk",
        json={"emails": emails, "role": "member"},
        headers=gym[Role.owner].headers,
    )
    assert response.status_code == 202
    return uuid.UUID(response.json["id"])


def _work(app, session_factory):
    return bulk_invitations.work_batches(session_factory, _outreach(app), now=NOW)


def _outcomes(session, batch_id):
    session.expire_all()
    return [r["outcome"] for r in session.get(InvitationBatch, batch_id).results]


def test_a_single_invite_while_the_worker_asks_the_provider_makes_the_address_pending(
    app, client, gym, session, session_factory, mailbox, idp, monkeypatch
):
    """The worker's checks run again after its lookup: staff who invited the address by hand
    meanwhile leave it invitation_pending, one invitation and one email."""
    batch_id = _queue(client, gym, ["race@example.test"])
    by_hand = _while_looking_up(monkeypatch, app, lambda: invite(client, gym, "race@example.test"))

    assert _work(app, session_factory)["invitation_pending"] == 1

    assert by_hand[0].status_code == 201
    assert _outcomes(session, batch_id) == ["invitation_pending"]
    assert count(session, Invitation) == 1
    assert [m["To"] for m in read_mailbox(mailbox)] == ["race@example.test"]
