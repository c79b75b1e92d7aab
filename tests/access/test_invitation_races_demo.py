"""The quick start's demo gym on the embedded default, its own connections (the shared-connection
fixtures of the other tests cannot show a second writer): while an invitation's identity
provider lookup answers, no write lock is held (decisions s41/s42), so a second request runs
meanwhile, and the invitation's checks run again after the lookup on what it wrote."""

from __future__ import annotations

import threading
import uuid

from sqlalchemy import func, select

from gymctl import clock
from gymctl.access import bulk_invitations
from gymctl.access.erasure import erase_personal_data
from gymctl.db import session_factory
from gymctl.models import Invitation, InvitationBatch, Organization
from tests import test_embedded_workflows as walks
from tests.test_embedded_workflows import OWNER

demo, api = walks.demo, walks.api  # the quick start's demo gym over its API (fixtures)

ORG = "/organizations/ORG"


def _aside(meanwhile):
    """`meanwhile` in a thread of its own: a second request, with its own session."""
    answers = []
    thread = threading.Thread(target=lambda: answers.append(meanwhile()))
    thread.start()
    thread.join(timeout=60)
    assert answers, "the second request did not finish (it waited on a write lock)"
    return answers[0]


def _while_looking_up(monkeypatch, api, meanwhile):
    """Run `meanwhile` (once, aside) while the identity provider answers the first lookup."""
    admin = api.client.application.extensions["gymctl"].outreach.identity_admin
    lookup, ran = admin.find_account, []

    def looked_up(email, keys):
        if not ran:
            ran.append(None)  # `meanwhile` looks up too: it is not run again
            ran[0] = _aside(meanwhile)
        return lookup(email, keys)

    monkeypatch.setattr(admin, "find_account", looked_up)
    return ran


def _sent_to(monkeypatch, api) -> list[str]:
    mailer = api.client.application.extensions["gymctl"].outreach.mailer
    send, sent = mailer.send, []

    def sending(message):
        sent.append(message.to)
        return send(message)

    monkeypatch.setattr(mailer, "send", sending)
    return sent


def _invitations(email: str) -> int:
    with session_factory()() as session:
        return session.scalar(
            select(func.count()).select_from(Invitation).where(Invitation.email == email)
        )


def test_a_double_click_ends_with_one_invitation_and_one_email(api, monkeypatch):
    """The second click runs while the first one's lookup answers (no write lock held); the
    first one's checks, run again, find the second's invitation: invitation_pending."""
    email = f"twice-{uuid.uuid4().hex[:8]}@demo-gym.example"
    sent = _sent_to(monkeypatch, api)

    def click():
        return api.client.post(
            f"{ORG}/invitations".replace("ORG", api.org),
            json={"email": email, "role": "member"},
            headers=api.token(OWNER),
        )

    second = _while_looking_up(monkeypatch, api, click)
    first = click()

    assert second[0].status_code == 201
    assert (first.status_code, first.json["code"]) == (409, "invitation_pending")
    assert _invitations(email) == 1
    assert sent == [email]


def test_an_address_erased_while_the_worker_asks_the_provider_is_not_invited(api, monkeypatch):
    """The bulk worker takes its batch again after the lookup: the member it asked about was
    erased meanwhile (the batch's address with them), so nothing is stored or sent for them."""
    member_email, other = "fran@demo-gym.example", f"b-{uuid.uuid4().hex[:8]}@demo-gym.example"
    batch_id = api.call(
        "POST",
        f"{ORG}/invitations/bulk",
        OWNER,
        202,
        json={"emails": [member_email, other], "role": "member"},
    )["id"]
    member_id, owner_id = api.user_id("user_demo_member_3"), api.user_id(OWNER)
    sent = _sent_to(monkeypatch, api)

    def erase():
        with session_factory()() as session:
            done = erase_personal_data(
                session,
                session.get(Organization, uuid.UUID(api.org)),
                uuid.UUID(member_id),
                actor_user_id=uuid.UUID(owner_id),
                now=clock.now(),
            )
            session.commit()
        return done

    erased = _while_looking_up(monkeypatch, api, erase)
    outreach = api.client.application.extensions["gymctl"].outreach
    bulk_invitations.work_batches(session_factory(), outreach, now=clock.now())

    assert erased[0]["bulkInvites"] == 1
    with session_factory()() as session:
        batch = session.get(InvitationBatch, uuid.UUID(batch_id))
        assert [r["outcome"] for r in batch.results] == ["erased", "invited"]
    assert _invitations(member_email) == 0
    assert sent == [other]
