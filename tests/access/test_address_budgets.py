"""Budgets and keys that follow the address by the one address rule (decisions s48,
`identity.users.address_keys`), not an invitation id or `str.lower()`:
- the invitation emails a gym sends an address (an invitation's own and its resends): revoking
  and inviting again got a fresh budget, so a script mailed an address without limit;
- the failed-checkout follow-up of a join link, one per address as sign-up reads addresses."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.invitations import RESENDS_PER_HOUR
from gymctl.identity.users import is_same_address
from gymctl.models import JoinLink, Role, Task
from gymctl.providers.mail import read_mailbox
from tests.access.conftest import snapshot
from tests.access.test_invitation_resend_limit import invite, resend
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def revoke(client, gym, invitation_id):
    answer = client.post(
        f"/organizations/{gym.id}/invitations/{invitation_id}/revoke",
        headers=gym[Role.owner].headers,
    )
    assert answer.status_code == 200, answer.json
    return answer


def test_revoking_and_inviting_again_keeps_the_addresss_spent_resends(
    engine, client, session, gym, mailbox
):
    first = invite(client, gym, "target@x.test")
    for _ in range(RESENDS_PER_HOUR - 1):
        assert resend(client, gym, first).status_code == 200
    revoke(client, gym, first)
    # The same address, as sign-up reads it: another case and surrounding space.
    again = invite(client, gym, "TARGET@x.test ")  # the hour's last email
    sent = len(read_mailbox(mailbox))
    before = snapshot(session)

    refused = resend(client, gym, again)

    assert (refused.status_code, refused.json["code"]) == (429, "rate_limited")
    assert 1 <= int(refused.headers["Retry-After"]) <= 3600
    assert len(read_mailbox(mailbox)) == sent
    assert snapshot(session) == before
    # Another address of the gym has its own budget.
    assert resend(client, gym, invite(client, gym, "other@x.test")).status_code == 200


def test_a_revoke_and_invite_loop_mails_an_address_no_more_than_its_budget(
    engine, client, session, gym, mailbox
):
    answers = []
    for _ in range(RESENDS_PER_HOUR + 3):
        answer = client.post(
            f"/organizations/{gym.id}/invitations",
            json={"email": "target@x.test", "role": "member"},
            headers=gym[Role.owner].headers,
        )
        answers.append(answer.status_code)
        if answer.status_code == 201:
            revoke(client, gym, answer.json["id"])

    # An invitation's own email and its resends: the hour's budget, then 429.
    assert answers == [201] * (RESENDS_PER_HOUR + 1) + [429] * 2
    assert len(read_mailbox(mailbox)) == RESENDS_PER_HOUR + 1


def _follow_ups(session, gym) -> list[Task]:
    session.expire_all()
    return list(
        session.scalars(
            select(Task).where(Task.organization_id == gym.id, Task.kind == "payment_follow_up")
        )
    )


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("A@example.test", "a@example.test"),  # ASCII case: one address on every engine
        # One address to PostgreSQL, two to str.lower() ('İ' is 'i' and a combining dot).
        ("İpek@example.test", "ipek@example.test"),
        # Two addresses to SQLite (it folds ASCII alone), one to str.lower().
        ("Élodie@example.test", "élodie@example.test"),
    ],
)
def test_a_failed_checkout_files_one_follow_up_per_address_by_the_one_rule(
    engine, client, session, gym, one, other
):
    link = JoinLink(organization_id=gym.id, token=f"t-{len(one)}-{one[0]}", created_at=NOW)
    session.add(link)
    session.commit()

    for email in (one, other):
        answer = client.post(f"/join/{link.token}/checkout-failed", json={"email": email})
        assert answer.status_code == 202, answer.json

    same = is_same_address(session, one, other)
    assert len(_follow_ups(session, gym)) == (1 if same else 2)
