"""The emails through the Mailer: SMTP end to end against a real aiosmtpd server on loopback,
and every template rendered in each of the three locales (en, he, es)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import CancellationSettlement
from gymctl.providers.mail import SmtpMailer
from gymctl.retention import emails
from gymctl.retention.copy import LOCALES, pick_locale
from gymctl.retention.settlement import period_end_sweep
from tests.conftest import NOW
from tests.providers.test_mail import smtp  # noqa: F401 (fixture: aiosmtpd on loopback)
from tests.retention.conftest import give_notice, paid_card_subscription


def test_the_membership_ended_email_reaches_a_real_smtp_server_in_the_members_language(
    session,
    session_factory,
    gym,
    card_server,
    doors,
    smtp,  # noqa: F811
    clock,
):
    controller, recorder = smtp
    subscription, _ = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + timedelta(days=30)
    )
    give_notice(session, gym, subscription, locale="he")
    session.commit()
    doors.mailer = SmtpMailer(
        f"smtp://127.0.0.1:{controller.port}", "gym <no-reply@gym.example>", clock=clock
    )
    result = period_end_sweep(session_factory, doors, now=subscription.current_period_end)
    assert result.emailed == 1
    [envelope] = recorder.envelopes
    assert envelope.rcpt_tos == [gym.member.email]
    message = recorder.message()
    assert message["Subject"] == f"המנוי שלך ב-{gym.organization.name} הסתיים"
    assert message["X-Gymctl-Tag"] == "membership_ended"
    assert "לא מגיע החזר" in message.get_content()
    assert session.scalar(select(CancellationSettlement.email_sent_at)) is not None


CONTEXTS = {
    "membership_ended": {
        "gym": "Iron",
        "member": "Noa",
        "ended_on": "2026-12-01",
        "refund_state": "refunded",
        "amount": "90.00 ILS",
        "given_by": "member",
    },
    **{
        f"billing_{kind}": {
            "gym": "Iron",
            "member": "Noa",
            "plan": "Founders",
            "amount": "99.00 ILS",
            "reason": "charge_failed",
            "pay_by": "2026-12-08",
            "on": "2026-12-01",
            "still_owed": True,
        }
        for kind in ("debt_opened", "cancelled_non_payment", "presale_charge_failed")
    },
    "presale_withdrawn": {
        "gym": "Iron",
        "member": "Noa",
        "plan": "Founders",
        "on": "2026-12-01",
        "by": "member",
    },
    "presale_charge_failed": {
        "gym": "Iron",
        "member": "Noa",
        "plan": "Founders",
        "on": "2026-12-01",
        "amount": "1 ILS",
    },
    "retention_digest": {
        "gym": "Iron",
        "day": "2026-12-01",
        "cases": [{"member": "Noa", "kind": "k", "ends": "x", "overdue": True, "contacted": False}],
    },
}


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_every_template_renders_in_every_locale(name, locale):
    subject, body = emails.render(name, locale, **CONTEXTS[name])
    assert subject
    assert "Subject:" not in body
    assert "{{" not in subject + body
    assert "Noa" in subject + body


@pytest.mark.parametrize("locale", LOCALES)
def test_the_cancellation_email_says_whether_the_balance_is_still_owed(locale):
    context = CONTEXTS["billing_cancelled_non_payment"]
    _, owed = emails.render("billing_cancelled_non_payment", locale, **context)
    _, paid = emails.render(
        "billing_cancelled_non_payment", locale, **{**context, "still_owed": False}
    )
    assert owed != paid
    assert "99.00 ILS" in owed  # what remained unpaid when cancelled, told either way
    assert "99.00 ILS" in paid
    assert len(paid) < len(owed)  # no way to pay offered for a balance already paid


@pytest.mark.parametrize("state", ["refunded", "processing", "none"])
def test_the_membership_ended_email_tells_the_refund_state(state):
    _, body = emails.render(
        "membership_ended", "en", **{**CONTEXTS["membership_ended"], "refund_state": state}
    )
    assert ("We refunded 90.00 ILS" in body) is (state == "refunded")
    assert ("processing this refund" in body) is (state == "processing")
    assert ("Nothing is owed" in body) is (state == "none")


@pytest.mark.parametrize("locale", LOCALES)
def test_the_membership_ended_email_says_who_gave_notice(locale):
    """Staff may give notice for a member: the email must not tell them they did."""
    context = CONTEXTS["membership_ended"]
    _, by_member = emails.render("membership_ended", locale, **context)
    _, by_staff = emails.render("membership_ended", locale, **{**context, "given_by": "staff"})
    assert by_member != by_staff
    assert "Iron" in by_staff.split("\n")[2]
    if locale == "en":
        assert "as you gave notice" in by_member
        assert "as Iron gave notice on your behalf" in by_staff


@pytest.mark.parametrize("reason", ["charge_failed", "cash_lapsed", "payment_due"])
def test_the_debt_opened_email_says_why_and_by_when(reason):
    _, body = emails.render(
        "billing_debt_opened", "en", **{**CONTEXTS["billing_debt_opened"], "reason": reason}
    )
    assert "You owe 99.00 ILS. Please pay it by 2026-12-08" in body
    assert ("could not charge your card" in body) is (reason == "charge_failed")
    assert ("prepaid period" in body) is (reason == "cash_lapsed")
    assert ("was due" in body) is (reason == "payment_due")


def test_the_locale_comes_from_the_client_and_falls_back_to_english():
    assert pick_locale("he-IL") == "he"
    assert pick_locale(None, "fr-FR,es;q=0.8") == "es"
    assert pick_locale("fr", "de") == "en"
    assert emails.render("membership_ended", "fr", **CONTEXTS["membership_ended"])[0].startswith(
        "Your membership"
    )
