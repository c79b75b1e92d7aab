"""Resending an invitation is limited per invitation (decisions s48): staff could resend one
without any limit, so a script of the gym's owner mailed an address as often as it liked.
Past the limit the resend answers 429 rate_limited with Retry-After, sends nothing and changes
nothing (its link stays the newest one sent); the budget comes back with the next window."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access.invitations import RESENDS_PER_DAY, RESENDS_PER_HOUR
from gymctl.models import Invitation, Role
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import snapshot
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def invite(client, gym, email):
    answer = client.post(
        f"/organizations/{gym.id}/invitations",
        json={"email": email, "role": "member"},
        headers=gym[Role.owner].headers,
    )
    assert answer.status_code == 201, answer.json
    return answer.json["id"]


def resend(client, gym, invitation_id, by=Role.owner, headers=None):
    return client.post(
        f"/organizations/{gym.id}/invitations/{invitation_id}/resend",
        headers=headers or gym[by].headers,
    )


def test_resends_past_the_hours_limit_are_refused_and_send_nothing(
    engine, client, session, gym, mailbox
):
    invitation_id = invite(client, gym, "target@x.test")
    for _ in range(RESENDS_PER_HOUR):
        assert resend(client, gym, invitation_id).status_code == 200
    sent = len(read_mailbox(mailbox))
    before = snapshot(session)

    refused = resend(client, gym, invitation_id, by=Role.admin)

    assert (refused.status_code, refused.json["code"]) == (429, "rate_limited")
    assert 1 <= int(refused.headers["Retry-After"]) <= 3600
    assert refused.json["retryAfter"] == int(refused.headers["Retry-After"])
    assert len(read_mailbox(mailbox)) == sent
    assert snapshot(session) == before
    # Another invitation of the gym has its own budget.
    other = invite(client, gym, "other@x.test")
    assert resend(client, gym, other).status_code == 200


def test_the_budget_comes_back_with_the_next_hour_within_the_days_limit(
    engine, app, client, session, gym, idp
):
    clock = app.extensions["gymctl"].clock
    invitation_id = invite(client, gym, "target@x.test")

    def at(instant):
        clock.set(instant)
        token = idp.token("user_owner", now=instant)  # a session token lives 60 s
        return {"Authorization": f"Bearer {token}"}

    answers = []
    for hour in range(RESENDS_PER_DAY // RESENDS_PER_HOUR + 2):
        headers = at(NOW + timedelta(hours=hour))
        answers += [
            resend(client, gym, invitation_id, headers=headers).status_code
            for _ in range(RESENDS_PER_HOUR)
        ]

    assert answers.count(200) == RESENDS_PER_DAY
    assert set(answers) == {200, 429}
    headers = at(NOW + timedelta(days=1, hours=1))
    assert resend(client, gym, invitation_id, headers=headers).status_code == 200
    session.expire_all()
    row = session.scalar(select(Invitation).where(Invitation.id == uuid.UUID(invitation_id)))
    assert row.send_count == RESENDS_PER_DAY + 2


def test_an_unknown_or_hostile_invitation_id_spends_no_budget_and_changes_nothing(
    engine, client, session, gym
):
    before = snapshot(session)
    for _ in range(RESENDS_PER_HOUR + 1):
        unknown = resend(client, gym, uuid.uuid4())
        assert (unknown.status_code, unknown.json["code"]) == (404, "invitation_not_found")
    hostile = client.post(
        f"/organizations/{gym.id}/invitations/%00x/resend", headers=gym[Role.owner].headers
    )
    assert 400 <= hostile.status_code < 500
    assert "code" in hostile.json
    assert snapshot(session) == before
