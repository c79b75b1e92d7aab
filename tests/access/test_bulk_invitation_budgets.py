"""A bulk invite mails each address within the address's budget in the gym, the one a single
invite and its resends count (decisions s48, `invitations.count_email`): a revoke and a bulk
invite again mailed an address without limit. An address over its budget is its own outcome,
address_rate_limited with retryAfter, and nothing is stored for it; the batch's other
addresses go on (rate_limited, the provider's, stops every later one: spec A 7)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.invitations import RESENDS_PER_HOUR
from gymctl.models import Invitation, InvitationStatus, Role
from gymctl.providers.mail import read_mailbox
from tests.access.test_address_budgets import revoke
from tests.access.test_bulk_invitations import queue, read, work
from tests.access.test_invitation_resend_limit import invite, resend

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines

EMAILS_PER_HOUR = RESENDS_PER_HOUR + 1  # an invitation's own email and its resends


def _bulk(app, client, gym, session_factory, emails):
    batch_id = queue(client, gym, emails).json["id"]
    work(app, session_factory)
    batch = read(client, gym, batch_id).json
    assert batch["status"] == "finished", batch
    return batch["results"]


def test_a_revoke_and_bulk_invite_loop_mails_an_address_no_more_than_its_budget(
    engine, app, client, gym, session_factory, mailbox
):
    outcomes = []
    for _ in range(EMAILS_PER_HOUR + 2):
        (result,) = _bulk(app, client, gym, session_factory, ["target@x.test"])
        outcomes.append(result["outcome"])
        if result["outcome"] == "invited":
            revoke(client, gym, result["id"])
        else:
            assert 1 <= result["retryAfter"] <= 3600

    assert outcomes == ["invited"] * EMAILS_PER_HOUR + ["address_rate_limited"] * 2
    assert len(read_mailbox(mailbox)) == EMAILS_PER_HOUR
    # The same budget as a single invite's: spent by the bulk invites, it refuses one too.
    single = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": "TARGET@x.test", "role": "member"},
        headers=gym[Role.owner].headers,
    )
    assert (single.status_code, single.json["code"]) == (429, "rate_limited")


def test_an_address_over_its_budget_is_skipped_and_the_others_go_on(
    engine, app, client, session, gym, session_factory, mailbox
):
    first = invite(client, gym, "target@x.test")
    for _ in range(EMAILS_PER_HOUR - 1):
        assert resend(client, gym, first).status_code == 200
    revoke(client, gym, first)

    results = _bulk(app, client, gym, session_factory, ["a@x.test", " Target@X.test", "b@x.test"])

    assert [(r["email"], r["outcome"]) for r in results] == [
        ("a@x.test", "invited"),
        ("Target@X.test", "address_rate_limited"),
        ("b@x.test", "invited"),
    ]
    assert 1 <= results[1]["retryAfter"] <= 3600
    mailed = sorted(m["To"] for m in read_mailbox(mailbox))
    assert mailed == ["a@x.test", "b@x.test", *["target@x.test"] * EMAILS_PER_HOUR]
    session.expire_all()
    stored = session.execute(select(Invitation.email, Invitation.status)).all()
    assert sorted(map(tuple, stored)) == [
        ("a@x.test", InvitationStatus.pending),
        ("b@x.test", InvitationStatus.pending),
        ("target@x.test", InvitationStatus.revoked),
    ]
