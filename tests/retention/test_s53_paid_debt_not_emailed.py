"""A debt paid before its "debt opened" email went out is not emailed (spec B 3, 6: the member
hears of their debt when it opens). s52 noticed and left it: the email job read the notice, not
the plan, so a debt the desk took minutes after it opened (or the member's pay-debt, or a retry
while the mail server was down) still told the member a payment had failed and what they owed.
A presale's decline paid that quickly lost its mark first (`overtaken.close_paid_presale`), so
its debt notice, covered by the presale email while marked, went out too. Now such a notice is
recorded (`debt_paid_first`, not sent) and nothing is mailed; a debt still owed is emailed, and
a notice of a debt paid and then opened again speaks only of the new one (its own notice). A
presale's failed opening-day charge paid first is not emailed either (s54)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.debt import open_debt
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models import MemberEmail
from gymctl.models.billing import PlanType
from gymctl.providers.mail import read_mailbox
from gymctl.retention.billing_emails import send_billing_emails
from tests.billing import factories as bf
from tests.billing.cards import Sandbox
from tests.conftest import NOW
from tests.retention.conftest import declined_presale, pay_at_desk

pytestmark = pytest.mark.embedded

PAID = NOW + timedelta(minutes=2)


def _kinds(session) -> list[tuple[str, bool]]:
    session.expire_all()
    rows = session.scalars(select(MemberEmail).order_by(MemberEmail.created_at, MemberEmail.id))
    return [(row.kind, row.sent_at is not None) for row in rows]


def _cash_debt_paid_at_desk(session, gym):
    """A cash month lapsed at NOW (its debt notice written), the desk taking it at PAID."""
    subscription = bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)
    session.commit()
    pay_at_desk(session, gym, subscription, now=PAID)
    return subscription


def test_a_cash_debt_paid_at_the_desk_before_its_email_is_not_emailed(
    session, session_factory, gym, mailer, mailbox
):
    _cash_debt_paid_at_desk(session, gym)

    summary = send_billing_emails(session_factory, mailer, now=PAID)

    assert (summary["sent"], summary["skipped"]) == (0, 1)
    assert read_mailbox(mailbox) == []
    assert _kinds(session) == [("debt_paid_first", False)]
    assert send_billing_emails(session_factory, mailer, now=PAID)["skipped"] == 0  # recorded


def test_a_debt_paid_then_opened_again_is_emailed_once_for_the_new_debt(
    session, session_factory, gym, mailer, mailbox
):
    subscription = _cash_debt_paid_at_desk(session, gym)
    again = PAID + timedelta(minutes=1)
    open_debt(session, subscription, amount_in_cents=1500, reason="charge_failed", since=again,
              now=again)  # fmt: skip
    session.commit()

    assert send_billing_emails(session_factory, mailer, now=again)["sent"] == 1
    [mail] = read_mailbox(mailbox)
    assert "You owe 15.00 ILS" in mail.get_content()
    assert sorted(_kinds(session)) == [("debt_opened", True), ("debt_paid_first", False)]


def test_a_debt_still_owed_is_emailed(session, session_factory, gym, mailer, mailbox):
    bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)
    session.commit()
    assert send_billing_emails(session_factory, mailer, now=PAID)["sent"] == 1
    assert _kinds(session) == [("debt_opened", True)]


def test_a_presale_decline_paid_before_its_email_is_not_emailed(
    session, session_factory, gym, mailer, mailbox, tmp_path
):
    """s54 (a hunt found it): the presale email ("your opening-day payment did not go through,
    we will try your card again daily") went out after the desk took the debt, while the
    staff's copy of the same case was already given up (`presales.notify_case`)."""
    opening = NOW + timedelta(days=3)
    subscription = declined_presale(
        session, session_factory, gym, Sandbox(tmp_path / "sandbox"), opening
    )
    pay_at_desk(session, gym, subscription, now=opening + timedelta(minutes=1))

    summary = send_billing_emails(session_factory, mailer, now=opening + timedelta(minutes=2))

    assert (summary["sent"], summary["skipped"]) == (0, 2)
    assert read_mailbox(mailbox) == []
    assert _kinds(session) == [("debt_paid_first", False), ("debt_paid_first", False)]


def test_a_presale_decline_still_owed_sends_the_member_only_the_presale_email(
    session, session_factory, gym, mailer, mailbox, tmp_path
):
    opening = NOW + timedelta(days=3)
    declined_presale(session, session_factory, gym, Sandbox(tmp_path / "sandbox"), opening)

    send_billing_emails(session_factory, mailer, now=opening + timedelta(minutes=2))

    assert sorted(_kinds(session)) == [
        ("covered_by_presale", False),
        ("presale_charge_failed", True),
    ]
    [mail] = read_mailbox(mailbox)
    assert "did not go through" in mail["Subject"]
