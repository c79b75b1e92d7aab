"""A presale charge-failure case closed before its email went out is not emailed (spec B 6:
"presale charge failed" goes to the case owner; s52 noticed it went out for a case already
closed). The desk took the debt a minute after the decline, before the presale cases pass
sent its email: the owner was told to chase a charge that had been paid. Now the pass gives
the email up (audit retention.email_given_up, reason debt_paid) and sends nothing. A case closed
with its debt still owed (the plan cancelled for non-payment) is still told."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models import AuditLog, RetentionCase
from gymctl.models.billing import SubscriptionStatus
from gymctl.providers.mail import read_mailbox
from gymctl.retention import presales
from tests.billing.cards import Sandbox
from tests.conftest import NOW
from tests.retention.conftest import declined_presale, pay_at_desk

pytestmark = pytest.mark.embedded

OPENING = NOW + timedelta(days=3)
PAID = OPENING + timedelta(minutes=1)


def test_a_presale_case_closed_before_its_email_is_given_up_not_sent(
    session, session_factory, gym, tmp_path, mailer, mailbox
):
    subscription = declined_presale(
        session, session_factory, gym, Sandbox(tmp_path / "sandbox"), OPENING
    )
    assert presales.open_charge_failed_cases(session, now=OPENING) == 1
    session.commit()
    pay_at_desk(session, gym, subscription, now=PAID)
    case = session.scalar(select(RetentionCase))
    assert (case.status, case.notified_at) == ("closed", None)

    assert presales.presale_cases_pass(session_factory, mailer, now=PAID) == {
        "opened": 0,
        "notified": 0,
    }

    assert read_mailbox(mailbox) == []
    session.expire_all()
    assert case.notified_at == PAID
    given_up = session.scalars(
        select(AuditLog).where(AuditLog.action == "retention.email_given_up")
    ).all()
    assert [(a.target_id, a.data) for a in given_up] == [
        (str(case.id), {"email": "presale_charge_failed", "reason": "debt_paid"})
    ]
    # Nothing left for the pass: it is not asked to run again.
    assert presales.cases_waiting(session) is False


def test_an_open_presale_case_is_still_emailed(
    session, session_factory, gym, tmp_path, mailer, mailbox
):
    declined_presale(session, session_factory, gym, Sandbox(tmp_path / "sandbox"), OPENING)
    assert presales.presale_cases_pass(session_factory, mailer, now=PAID) == {
        "opened": 1,
        "notified": 1,
    }
    [sent] = read_mailbox(mailbox)
    assert sent["To"] == gym.owner.email


def test_a_case_closed_by_the_cancellation_for_non_payment_is_still_emailed(
    session, session_factory, gym, tmp_path, mailer, mailbox
):
    """The debt is still owed: the owner has not been told the opening charge failed (the
    member's own debt notice is covered by this email), so it goes out."""
    subscription = declined_presale(
        session, session_factory, gym, Sandbox(tmp_path / "sandbox"), OPENING
    )
    assert presales.open_charge_failed_cases(session, now=OPENING) == 1
    session.commit()
    cancelled_at = OPENING + timedelta(days=30)
    run_lifecycle(session, now=cancelled_at)
    session.commit()
    session.expire_all()
    case = session.scalar(select(RetentionCase))
    assert (subscription.status, case.status, case.outcome) == (
        SubscriptionStatus.cancelled,
        "closed",
        "lost_payment",
    )

    assert presales.presale_cases_pass(session_factory, mailer, now=cancelled_at) == {
        "opened": 0,
        "notified": 1,
    }
    [sent] = read_mailbox(mailbox)
    assert sent["To"] == gym.owner.email
