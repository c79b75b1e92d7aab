"""A presale's debt paid clears its charge-failure mark and closes its case (spec B 2.1, 3, 6).

A presale whose opening-day charge was declined is in debt, marked presale_charge_failed
(`attempts.leave_unpaid`), and gets a presale_charge_failed case. Once the debt was paid (the
collector's retry, the desk, the member's own pay-debt) the plan was active but still marked,
and its case open: the first ordinary renewal declined later then opened a second presale case
(the owner told of a presale's failed opening charge) and the member's own "debt opened" email
was recorded as covered by a presale email that never came. Now the payment that restores the
plan clears the mark and closes the case saved_member_withdrew, in its own transaction
(`overtaken.close_paid_presale`, from `attempts.grant_period`).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from dateutil.relativedelta import relativedelta
from sqlalchemy import select

from gymctl.billing import collector, debt_payments
from gymctl.models import AuditLog, MemberEmail, RetentionCase
from gymctl.models.billing import SubscriptionStatus
from gymctl.models.retention import CaseKind
from gymctl.retention import cases, presales
from gymctl.retention.billing_emails import send_billing_emails
from tests.billing.cards import APPROVE, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import declined_presale, pay_at_desk

pytestmark = pytest.mark.embedded  # the demo gym sells presales

OPENING = NOW + timedelta(days=3)
PAID = OPENING + timedelta(days=1)  # the debt's first daily retry
RENEWAL = OPENING + relativedelta(months=1)


def _pay_at_desk(session, session_factory, gym, sandbox, subscription) -> None:
    pay_at_desk(session, gym, subscription, now=PAID)


def _retry_with_a_new_card(session, session_factory, gym, sandbox, subscription) -> None:
    declining = subscription.payment_method_id
    subscription.payment_method_id = save_test_card(
        session, gym, sandbox.provider, sandbox.simulator, APPROVE
    ).id
    session.commit()
    summary = collector.catch_up(session_factory, sandbox.provider, now=PAID, cipher=TEST_CIPHER)
    assert summary.charged == 1
    session.expire_all()
    subscription.payment_method_id = declining  # the renewal is declined again
    session.commit()


def _pay_own_debt(session, session_factory, gym, sandbox, subscription) -> None:
    declining = subscription.payment_method_id
    subscription.payment_method_id = save_test_card(
        session, gym, sandbox.provider, sandbox.simulator, APPROVE
    ).id
    session.commit()
    outcome = debt_payments.pay_own_debt(
        session_factory,
        sandbox.provider,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        user_id=gym.member.id,
        now=PAID,
        cipher=TEST_CIPHER,
    )
    assert outcome == "charged"
    session.expire_all()
    subscription.payment_method_id = declining
    session.commit()


@pytest.mark.parametrize("pay", [_pay_at_desk, _retry_with_a_new_card, _pay_own_debt])
def test_a_paid_presale_debt_closes_its_case_and_a_later_renewal_decline_is_an_ordinary_debt(
    session, session_factory, gym, tmp_path, mailer, pay
):
    sandbox = Sandbox(tmp_path / "sandbox")
    subscription = declined_presale(session, session_factory, gym, sandbox, OPENING)
    assert presales.open_charge_failed_cases(session, now=OPENING) == 1
    session.commit()
    case = session.scalar(select(RetentionCase))

    pay(session, session_factory, gym, sandbox, subscription)

    session.expire_all()
    assert subscription.status == SubscriptionStatus.active
    assert subscription.retention_case_kind is None
    assert (case.status, case.outcome, case.closed_at) == ("closed", "saved_member_withdrew", PAID)
    assert cases.open_cases(session, gym.organization.id) == []
    audit = session.scalar(select(AuditLog).where(AuditLog.action == "retention.case_closed"))
    assert (audit.target_id, audit.data["outcome"], audit.data["reason"]) == (
        str(case.id),
        "saved_member_withdrew",
        "debt_paid",
    )

    # The first ordinary renewal is declined: an ordinary debt, told to the member.
    renewal = collector.catch_up(session_factory, sandbox.provider, now=RENEWAL, cipher=TEST_CIPHER)
    assert renewal.declined == 1
    session.expire_all()
    assert presales.open_charge_failed_cases(session, now=RENEWAL) == 0
    session.commit()
    assert send_billing_emails(session_factory, mailer, now=RENEWAL)["sent"] == 1
    [email] = session.scalars(select(MemberEmail)).all()
    assert (email.kind, email.sent_at) == ("debt_opened", RENEWAL)
    kinds = session.scalars(select(RetentionCase.kind)).all()
    assert kinds == [CaseKind.presale_charge_failed.value]  # the first one, closed: no other
