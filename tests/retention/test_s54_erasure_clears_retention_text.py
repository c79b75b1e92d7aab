"""Erasure clears the free text a gym holds about the person in its retention follow-up (spec A
2.8): their own words on a cancellation notice and staff's notes of contacts about them. A hunt
in s54 found both kept word for word after an erasure (a phone number, a health detail). What a
case's outcome reads stays: the reason code, the channel, the dates. Another member's text
stays too."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.erasure import erase_personal_data
from gymctl.models import AuditLog, CancellationNotice, RetentionContact
from tests import factories
from tests.billing import factories as bf
from tests.conftest import NOW
from tests.retention.conftest import give_notice, log_contact

pytestmark = pytest.mark.embedded

SECRET = "moving to Haifa, call me on 052-1234567 after my surgery"


def test_erasure_clears_the_notices_and_contacts_free_text_and_keeps_their_facts(session, gym):
    subscription = bf.make_subscription(session, gym)
    _, case = give_notice(session, gym, subscription, reason_code="moving_away", reason_text=SECRET)
    log_contact(session, gym, case, channel="phone", note="spoke to her husband; " + SECRET)
    other = factories.user(session)
    membership = factories.membership(session, user=other, organization=gym.organization)
    kept = bf.make_subscription(session, gym, membership=membership)
    _, other_case = give_notice(
        session, gym, kept, actor_user_id=other.id, reason_code="price", reason_text="too dear"
    )
    log_contact(session, gym, other_case, note="offered a discount")

    done = erase_personal_data(
        session, gym.organization, gym.member.id, actor_user_id=gym.owner.id, now=NOW
    )
    session.flush()
    session.expire_all()

    assert done["retentionTexts"] == 2
    notices = session.execute(
        select(
            CancellationNotice.user_id,
            CancellationNotice.reason_code,
            CancellationNotice.reason_text,
        )
    ).all()
    assert sorted(notices, key=lambda row: row.reason_code) == [
        (gym.member.id, "moving_away", None),
        (other.id, "price", "too dear"),
    ]
    contacts = session.execute(
        select(RetentionContact.case_id, RetentionContact.channel, RetentionContact.note)
    ).all()
    assert sorted(contacts, key=lambda row: row.note or "") == [
        (case.id, "phone", None),
        (other_case.id, "phone", "offered a discount"),
    ]
    audit = session.scalar(select(AuditLog).where(AuditLog.action == "personal_data.erased"))
    assert audit.data["retentionTexts"] == 2
