"""Member-facing billing emails (spec B 3, 6): the member hears of their debt when it opens, of
the cancellation for non-payment, and of a presale's failed opening-day charge, each once, in
their language; a failed handover is retried."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import collector
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models import MemberEmail
from gymctl.models.billing import PlanType
from gymctl.providers.mail import MailError, read_mailbox
from gymctl.retention.billing_emails import send_billing_emails
from gymctl.retention.notices import REASON_CODES
from gymctl.retention.settlement import period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import DECLINE, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded


def _bodies(mailbox) -> list[tuple[str, str]]:
    return [(m["Subject"], m.get_content()) for m in read_mailbox(mailbox)]


def test_debt_opened_then_cancelled_for_non_payment_each_email_the_member_once(
    session, gym, mailer, mailbox
):
    subscription = bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)

    assert send_billing_emails(session, mailer, now=NOW) == {"sent": 1, "failed": 0, "skipped": 0}
    assert send_billing_emails(session, mailer, now=NOW)["sent"] == 0
    [(subject, body)] = _bodies(mailbox)
    assert subject == f"A payment to {gym.organization.name} is outstanding"
    # day 0 = Nov 21, day 7 = Nov 28: the last day to pay
    assert "You owe 80.00 ILS. Please pay it by 2026-11-28" in body
    assert "prepaid period" in body

    later = NOW + timedelta(days=8)
    run_lifecycle(session, now=later)
    assert send_billing_emails(session, mailer, now=later)["sent"] == 1
    cancelled = f"Your membership at {gym.organization.name} was cancelled for non-payment"
    [body] = [body for subject, body in _bodies(mailbox) if subject == cancelled]
    assert "80.00 ILS remained unpaid" in body
    kinds = session.scalars(select(MemberEmail.kind).order_by(MemberEmail.created_at)).all()
    assert kinds == ["debt_opened", "cancelled_non_payment"]
    assert {row.subscription_id for row in session.scalars(select(MemberEmail))} == {
        subscription.id
    }


def test_a_presale_decline_emails_the_member_once_about_the_opening_day(
    session, session_factory, gym, mailer, mailbox, tmp_path
):
    sandbox = Sandbox(tmp_path / "sandbox")
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, DECLINE)
    opening = NOW - timedelta(minutes=1)
    bf.make_subscription(session, gym, presale_opening=opening, payment_method_id=method.id)
    session.commit()
    summary = collector.catch_up(session_factory, sandbox.provider, now=NOW, cipher=TEST_CIPHER)
    assert summary.declined == 1

    counts = send_billing_emails(session, mailer, now=NOW)

    assert counts == {"sent": 1, "failed": 0, "skipped": 1}  # the debt notice is covered
    [(subject, body)] = _bodies(mailbox)
    assert subject == f"Your opening-day payment to {gym.organization.name} did not go through"
    assert "99.00 ILS" in body


def test_the_member_reads_it_in_the_language_of_their_notice_and_a_failure_is_retried(
    session, gym, mailer, mailbox
):
    subscription = bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    give_notice(session, gym, subscription, locale="es", now=NOW - timedelta(days=20))
    subscription.cancel_at_period_end = False  # the lifecycle leaves notice rows to their sweep
    run_lifecycle(session, now=NOW)

    class Down:
        def send(self, email):
            raise MailError("smtp down")

    assert send_billing_emails(session, Down(), now=NOW) == {"sent": 0, "failed": 1, "skipped": 0}
    assert session.scalars(select(MemberEmail)).all() == []
    assert send_billing_emails(session, mailer, now=NOW)["sent"] == 1
    [(subject, _)] = _bodies(mailbox)
    assert subject == f"Tienes un pago pendiente con {gym.organization.name}"


def test_notices_older_than_the_lookback_are_not_mailed(session, gym, mailer, mailbox):
    bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)

    assert send_billing_emails(session, mailer, now=NOW + timedelta(days=3))["sent"] == 0
    assert read_mailbox(mailbox) == []


def test_the_membership_ended_email_of_a_staff_notice_says_the_gym_gave_it(
    session, session_factory, gym, doors, mailbox
):

    ending = bf.make_subscription(session, gym, PlanType.cash, current_period_end=NOW)
    give_notice(
        session,
        gym,
        ending,
        initiator="staff",
        actor_user_id=gym.owner.id,
        reason_code=REASON_CODES[0],
        now=NOW - timedelta(3),
    )
    session.commit()

    assert period_end_sweep(session_factory, doors, now=NOW).emailed == 1

    [(_, body)] = _bodies(mailbox)
    assert f"as {gym.organization.name} gave notice on your behalf" in body
