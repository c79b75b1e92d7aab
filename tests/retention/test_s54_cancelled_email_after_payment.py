"""The "cancelled for non-payment" email of a debt paid before it went out says the balance was
paid (spec B 3, 6: the member hears of the cancellation). s53 noticed and left it: the email
still said "The balance is still owed, and booking classes stays blocked until it is paid" of a
debt the desk had taken. The cancellation stands and is still told, in the member's locale;
only the sentence about the balance follows the plan's debt as it is when the email goes out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models.billing import PlanType
from gymctl.providers.mail import read_mailbox
from gymctl.retention.billing_emails import send_billing_emails
from tests.billing import factories as bf
from tests.conftest import NOW
from tests.retention.conftest import pay_at_desk

pytestmark = pytest.mark.embedded

CANCELLED = NOW + timedelta(days=8)  # a cash month lapsed at NOW, past the 7 days of grace


def _cancelled_for_non_payment(session, gym):
    subscription = bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)
    run_lifecycle(session, now=CANCELLED)
    session.commit()
    assert subscription.status.value == "cancelled"
    return subscription


def _cancellation_body(gym, mailbox) -> str:
    subject = f"Your membership at {gym.organization.name} was cancelled for non-payment"
    [body] = [m.get_content() for m in read_mailbox(mailbox) if m["Subject"] == subject]
    return body


def test_a_cancellation_email_sent_after_the_debt_was_paid_says_it_was_paid(
    session, session_factory, gym, mailer, mailbox
):
    subscription = _cancelled_for_non_payment(session, gym)
    paid = CANCELLED + timedelta(minutes=5)
    pay_at_desk(session, gym, subscription, now=paid)

    summary = send_billing_emails(session_factory, mailer, now=paid)

    assert summary["sent"] == 1  # the cancellation; the debt notice was paid first
    body = _cancellation_body(gym, mailbox)
    assert "80.00 ILS remained unpaid" in body
    assert "The balance has since been paid: thank you." in body
    assert "still owed" not in body
    assert "blocked" not in body


def test_a_cancellation_email_of_a_debt_still_owed_asks_for_it(
    session, session_factory, gym, mailer, mailbox
):
    _cancelled_for_non_payment(session, gym)

    send_billing_emails(session_factory, mailer, now=CANCELLED)

    body = _cancellation_body(gym, mailbox)
    assert "The balance is still owed, and booking classes stays blocked" in body
    assert "since been paid" not in body
