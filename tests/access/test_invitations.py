"""Invitations (spec A 2.4, 3, 5.3): create, accept, auto-accept, hold, revoke, resend, expire."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import func, select

from gymctl.access.invitations import expire_invitations
from gymctl.identity.webhook_signature import sign
from gymctl.models import (
    AuditLog,
    Invitation,
    InvitationStatus,
    Membership,
    MembershipStatus,
    Role,
    User,
)
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import signed_in
from tests.conftest import NOW, WEBHOOK_SECRET
from tests.providers.test_mail import smtp  # noqa: F401 (fixture)

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def invite(client, gym, email, role="member", by=Role.owner):
    return client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": email, "role": role},
        headers=gym[by].headers,
    )


def link_in(message, name):
    body = message.get_body(("plain",)).get_content()
    url = next(word for word in body.split() if word.startswith("https://"))
    return parse_qs(urlparse(url).query)[name][0], url


def count(session, model, *where):
    return session.scalar(select(func.count()).select_from(model).where(*where))


def test_an_address_without_an_account_gets_a_sign_up_ticket_email(
    client, gym, session, mailbox, idp
):
    response = invite(client, gym, "Newbie@Example.test")
    assert response.status_code == 201
    assert (response.json["status"], response.json["existingAccount"]) == ("pending", False)
    [message] = read_mailbox(mailbox)
    assert message["To"] == "Newbie@example.test"
    ticket, url = link_in(message, "__identity_ticket")
    assert url.startswith("https://app.example.test/sign-up?")
    assert ticket.count(".") == 2
    [provider_invitation] = idp.invitations
    assert provider_invitation["email_address"] == "Newbie@example.test"
    assert count(session, Membership, Membership.organization_id == gym.id) == 4  # none yet


def test_an_existing_account_gets_a_pending_invitation_membership_at_once(
    client, gym, session, mailbox, idp
):
    idp.add_account("user_known", "known@example.test", verified=True)
    response = invite(client, gym, "known@example.test", role="coach")
    assert response.json["existingAccount"] is True
    user = session.scalar(select(User).where(User.identity_id == "user_known"))
    membership = session.scalar(select(Membership).where(Membership.user_id == user.id))
    assert (membership.status, membership.role) == (MembershipStatus.pending_invitation, Role.coach)
    assert membership.invitation_held is False
    token, _url = link_in(read_mailbox(mailbox)[0], "token")
    accepted = client.post(
        "/invitations/accept",
        json={"token": token},
        headers={"Authorization": f"Bearer {idp.token('user_known', now=NOW)}"},
    )
    assert (accepted.status_code, accepted.json["status"]) == (200, "accepted")
    session.refresh(membership)
    assert membership.status is MembershipStatus.active
    again = client.post(
        "/invitations/accept",
        json={"token": token},
        headers={"Authorization": f"Bearer {idp.token('user_known', now=NOW)}"},
    )
    assert (again.status_code, again.json["code"]) == (409, "invitation_not_pending")


def test_invitation_to_an_unproven_login_is_held_and_opening_the_email_never_releases_it(
    client, gym, session, mailbox, idp
):
    """Spec A 5.3: a staff invitation to a login whose email is unproven is held."""
    unproven = signed_in(
        idp, session, identity_id="user_unproven", email="maybe@example.test", verified=False
    )
    session.commit()
    idp.add_account("user_unproven", "maybe@example.test", verified=False)
    assert invite(client, gym, "maybe@example.test", role="coach").status_code == 201
    membership = session.scalar(select(Membership).where(Membership.user_id == unproven.user.id))
    assert membership.invitation_held is True
    assert count(session, AuditLog, AuditLog.action == "membership.invitation_held") == 1
    me = client.get("/users/me", headers=unproven.headers).json
    assert me["invitationHeld"] is True

    token, _ = link_in(read_mailbox(mailbox)[0], "token")
    refused = client.post("/invitations/accept", json={"token": token}, headers=unproven.headers)
    assert (refused.status_code, refused.json["code"]) == (403, "INVITATION_HELD")
    session.refresh(membership)
    assert (membership.status, membership.invitation_held) == (
        MembershipStatus.pending_invitation,
        True,
    )

    admin = signed_in(idp, session, identity_id="user_platform", email="ops@platform.example")
    session.commit()
    idp.add_account(
        "user_platform", "ops@platform.example", private_metadata={"platformRole": "admin"}
    )
    marked = client.post(
        f"/admin/users/{unproven.user.id}/mark-email-verified", headers=admin.headers
    )
    assert marked.status_code == 200
    me = client.get("/users/me", headers=unproven.headers).json
    assert me["invitationHeld"] is False
    assert {m["organizationId"]: m["status"] for m in me["memberships"]} == {str(gym.id): "active"}


def _deliver_user_created(client, identity_id, email, *, verified):
    body = json.dumps(
        {
            "type": "user.created",
            "data": {
                "id": identity_id,
                "primary_email_address_id": "e1",
                "email_addresses": [
                    {
                        "id": "e1",
                        "email_address": email,
                        "verification": {"status": "verified" if verified else "unverified"},
                    }
                ],
            },
        }
    ).encode()
    timestamp = int(NOW.timestamp())
    headers = {
        "svix-id": f"msg_{identity_id}",
        "svix-timestamp": str(timestamp),
        "svix-signature": sign(WEBHOOK_SECRET, f"msg_{identity_id}", timestamp, body),
    }
    return client.post(
        "/webhooks/identity", data=body, headers=headers, content_type="application/json"
    )


def test_user_created_with_a_proven_address_auto_accepts_matching_invitations(client, gym, session):
    invite(client, gym, "fresh@example.test")
    assert (
        _deliver_user_created(client, "user_fresh", "fresh@example.test", verified=True).status_code
        == 200
    )
    invitation = session.scalar(select(Invitation).where(Invitation.email == "fresh@example.test"))
    assert invitation.status is InvitationStatus.accepted
    user = session.scalar(select(User).where(User.identity_id == "user_fresh"))
    membership = session.scalar(select(Membership).where(Membership.user_id == user.id))
    assert (membership.status, membership.role) == (MembershipStatus.active, Role.member)


def test_user_created_with_an_unproven_address_holds_matching_invitations(client, gym, session):
    invite(client, gym, "joiner@example.test", role="coach")
    _deliver_user_created(client, "user_joiner", "joiner@example.test", verified=False)
    invitation = session.scalar(select(Invitation).where(Invitation.email == "joiner@example.test"))
    assert invitation.status is InvitationStatus.pending
    user = session.scalar(select(User).where(User.identity_id == "user_joiner"))
    membership = session.scalar(select(Membership).where(Membership.user_id == user.id))
    assert (membership.status, membership.invitation_held) == (
        MembershipStatus.pending_invitation,
        True,
    )


def test_resend_replaces_the_link_and_the_old_one_stops_working(client, gym, session, mailbox, idp):
    idp.add_account("user_known", "known@example.test")
    created = invite(client, gym, "known@example.test").json
    [first] = read_mailbox(mailbox)
    old_token, _ = link_in(first, "token")
    resent = client.post(
        f"/organizations/{gym.id}/invitations/{created['id']}/resend",
        headers=gym[Role.coach].headers,
    )
    assert (resent.status_code, resent.json["sendCount"]) == (200, 2)
    headers = {"Authorization": f"Bearer {idp.token('user_known', now=NOW)}"}
    stale = client.post("/invitations/accept", json={"token": old_token}, headers=headers)
    assert (stale.status_code, stale.json["code"]) == (400, "ticket_invalid")
    tokens = {link_in(message, "token")[0] for message in read_mailbox(mailbox)}
    [new_token] = tokens - {old_token}
    assert (
        client.post("/invitations/accept", json={"token": new_token}, headers=headers).status_code
        == 200
    )


def test_accepting_someone_elses_invitation_is_refused(client, gym, session, mailbox, idp):
    idp.add_account("user_known", "known@example.test")
    invite(client, gym, "known@example.test")
    token, _ = link_in(read_mailbox(mailbox)[0], "token")
    response = client.post(
        "/invitations/accept", json={"token": token}, headers=gym[Role.member].headers
    )
    assert (response.status_code, response.json["code"]) == (403, "invitation_other_address")


@pytest.mark.parametrize("token", ["garbage", "a.b.c"])
def test_a_forged_ticket_is_refused(client, gym, token):
    response = client.post(
        "/invitations/accept", json={"token": token}, headers=gym[Role.member].headers
    )
    assert (response.status_code, response.json["code"]) == (400, "ticket_invalid")


def test_coaches_revoke_or_resend_only_member_role_invitations(client, gym, session):
    coach_invite = invite(client, gym, "c@example.test", role="coach").json
    member_invite = invite(client, gym, "m@example.test", role="member").json
    base = f"/organizations/{gym.id}/invitations"
    for action in ("revoke", "resend"):
        refused = client.post(
            f"{base}/{coach_invite['id']}/{action}", headers=gym[Role.coach].headers
        )
        assert (refused.status_code, refused.json["code"]) == (403, "role_grant_forbidden")
    assert (
        client.post(f"{base}/{member_invite['id']}/revoke", headers=gym[Role.coach].headers).json[
            "status"
        ]
        == "revoked"
    )
    assert session.get(Invitation, uuid.UUID(coach_invite["id"])).status is InvitationStatus.pending


@pytest.mark.parametrize(
    ("by", "role"),
    [(Role.coach, "coach"), (Role.coach, "admin"), (Role.admin, "admin"), (Role.admin, "owner")],
)
def test_the_role_grant_matrix_limits_invitations(client, gym, session, by, role):
    response = invite(client, gym, "x@example.test", role=role, by=by)
    assert (response.status_code, response.json["code"]) == (403, "role_grant_forbidden")
    assert count(session, Invitation) == 0


def test_refusals_of_a_duplicate_and_a_second_owner(client, gym, session):
    assert invite(client, gym, "dup@example.test").status_code == 201
    duplicate = invite(client, gym, "DUP@example.test")
    assert (duplicate.status_code, duplicate.json["code"]) == (409, "invitation_pending")
    owner = invite(client, gym, "boss@example.test", role="owner")
    assert (owner.status_code, owner.json["code"]) == (409, "owner_exists")
    assert count(session, Invitation) == 1


def test_listing_invitations_is_staff_only(client, gym):
    invite(client, gym, "a@example.test")
    assert (
        len(
            client.get(
                f"/organizations/{gym.id}/invitations", headers=gym[Role.coach].headers
            ).json["invitations"]
        )
        == 1
    )
    refused = client.get(f"/organizations/{gym.id}/invitations", headers=gym[Role.member].headers)
    assert (refused.status_code, refused.json["code"]) == (403, "permission_denied")


def test_a_mail_failure_refuses_and_keeps_nothing(settings, session_factory, clock, gym, session):
    from gymctl.providers.mail import SmtpMailer
    from webhooks.app import create_app

    app = create_app(
        settings,
        session_factory=session_factory,
        clock=clock,
        mailer=SmtpMailer("smtp://127.0.0.1:1", settings.mail_from),
    )
    response = invite(app.test_client(), gym, "nomail@example.test")
    assert (response.status_code, response.json["code"]) == (502, "mail_failed")
    assert count(session, Invitation) == 0


def test_expiry_sweep_expires_once_and_ends_pending_memberships(client, gym, session, idp):
    idp.add_account("user_known", "known@example.test")
    invite(client, gym, "known@example.test")
    invite(client, gym, "nobody@example.test")
    later = NOW + timedelta(days=15)
    assert expire_invitations(session, now=later) == {"expired": 2}
    assert expire_invitations(session, now=later) == {"expired": 0}
    user = session.scalar(select(User).where(User.identity_id == "user_known"))
    membership = session.scalar(select(Membership).where(Membership.user_id == user.id))
    assert membership.status is MembershipStatus.cancelled


def test_the_invitation_email_goes_out_through_smtp(settings, session_factory, clock, gym, smtp):  # noqa: F811
    """The real path: an SMTP server on loopback receives the sign-up ticket."""
    from gymctl.providers.mail import SmtpMailer
    from webhooks.app import create_app

    controller, recorder = smtp
    mailer = SmtpMailer(f"smtp://127.0.0.1:{controller.port}", settings.mail_from)
    app = create_app(settings, session_factory=session_factory, clock=clock, mailer=mailer)
    assert invite(app.test_client(), gym, "smtp.person@example.test").status_code == 201
    [envelope] = recorder.envelopes
    assert envelope.rcpt_tos == ["smtp.person@example.test"]
    ticket, _ = link_in(recorder.message(), "__identity_ticket")
    assert ticket.count(".") == 2


@pytest.mark.parametrize(
    "email",
    ["outsider@evil.test,staff@example.test", "staff@example.test;outsider@evil.test",
     "staff@@example.test", "Staff <staff@example.test>"],
    ids=["comma", "semicolon", "two-ats", "display-name"],
)  # fmt: skip
def test_an_address_that_names_two_recipients_is_email_invalid_and_nothing_is_sent(
    client, gym, session, mailbox, idp, email
):
    """`a@x.test,b@y.test` passed as one address (an "@" and a dot in the domain) and was one
    To header with two recipients: whoever typed it had a coach's invitation link mailed to an
    address of their choosing. RFC 5322's specials end an address; none is taken in one."""
    before = count(session, Invitation)
    response = invite(client, gym, email, role="coach")
    assert response.status_code == 422, response.json
    assert response.json["code"] == "email_invalid"
    assert count(session, Invitation) == before
    assert read_mailbox(mailbox) == []
    assert idp.invitations == []
