"""A deleted gym is sent no retention digest (spec B 6: the digest goes to owners and admins
daily; A 2: inactive or deleted organizations deny access).

Deleting a gym ends its members' plans (`access.leaving.end_holdings`), which closes their
notice and presale charge-failure cases, but a presale_withdrawal case (closed only by staff
recording an outcome) stays open. Every organization route of the deleted gym answers 404
(`resolve_membership`: live organizations only), so no one can ever close it. A hunt in s63
found the daily digest (`digest.send_digests`) selecting every organization with an open case,
deleted or not, and mailing the former owners and admins about it every day, for good."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.access import gyms
from gymctl.access.memberships import resolve_membership
from gymctl.errors import DomainError
from gymctl.providers.mail import read_mailbox
from gymctl.retention import digest
from gymctl.retention.presales import withdraw_presale
from tests.billing.factories import make_subscription
from tests.conftest import NOW


@pytest.mark.embedded
def test_a_deleted_gym_is_sent_no_retention_digest(session, session_factory, gym, mailer, mailbox):
    presale = make_subscription(session, gym, presale_opening=NOW + timedelta(days=10))
    withdraw_presale(
        session, gym.organization.id, presale.id,
        actor_user_id=gym.member.id, by_member=True, locale="en", now=NOW,
    )  # fmt: skip
    gyms.delete_organization(session, gym.organization, actor_user_id=gym.owner.id, now=NOW)
    session.commit()
    with pytest.raises(DomainError):  # staff can no longer reach the case to close it
        resolve_membership(session, gym.organization.id, gym.owner)
    before = len(read_mailbox(mailbox))

    for day in (1, 2):
        sent = digest.send_digests(session_factory, mailer, now=NOW + timedelta(days=day, hours=8))
        assert sent["sent"] == 0, f"day {day}: {sent}"
    assert len(read_mailbox(mailbox)) == before
