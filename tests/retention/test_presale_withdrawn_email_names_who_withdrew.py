"""The presale-withdrawn email says who withdrew: the member or staff (spec B 3: "recorded as
the member's own act when done by the member"). It read the case owner, which the
acknowledgement sets: staff who took the case before a retried email went out turned a
member's withdrawal into staff's. It reads the withdrawal's own record now."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.providers.mail import read_mailbox
from gymctl.retention import cases, presales
from tests.billing import factories as bf
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _withdrawn_then_acknowledged(session, gym, *, by_member: bool):
    """A presale withdrawn at NOW whose email did not go out at once (the mail server was
    down), its case acknowledged by the owner an hour later."""
    subscription = bf.make_subscription(session, gym, presale_opening=NOW + timedelta(days=10))
    _, case = presales.withdraw_presale(
        session,
        gym.organization.id,
        subscription.id,
        actor_user_id=gym.member.id if by_member else gym.owner.id,
        by_member=by_member,
        locale="en",
        now=NOW,
    )
    cases.acknowledge(session, gym.organization.id, case.id, actor_user_id=gym.owner.id, now=NOW)
    assert case.owner_user_id == gym.owner.id
    session.commit()


@pytest.mark.parametrize(("by_member", "said"), [(True, "by the member"), (False, "by staff")])
def test_the_retried_withdrawal_email_names_who_withdrew_whoever_took_the_case(
    session, session_factory, gym, mailer, mailbox, by_member, said
):
    _withdrawn_then_acknowledged(session, gym, by_member=by_member)

    done = presales.presale_cases_pass(session_factory, mailer, now=NOW + timedelta(hours=1))

    assert done == {"opened": 0, "notified": 1}
    [email] = read_mailbox(mailbox)
    assert f"({said})" in email.get_content()
