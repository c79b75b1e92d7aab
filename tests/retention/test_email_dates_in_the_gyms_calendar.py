"""Days in retention emails are the gym's own calendar days (spec B 2.5: organization settings
carry a timezone; the member-facing billing emails already tell days that way): the
membership-ended email's end day, the digest's "ends" and the presale emails' days. A gym in
Jerusalem whose member's plan ends at 01:30 on 1 December was told it ended on 30 November (the
UTC day); a presale withdrawal emailed after a retry was dated the day of the retry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from gymctl.models import RetentionCase
from gymctl.providers.mail import read_mailbox
from gymctl.retention import digest, presales
from gymctl.retention.settlement import period_end_sweep
from tests.billing.factories import make_billing_settings, make_plan, make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice

JERUSALEM = "Asia/Jerusalem"  # UTC+2 in winter
# 23:30 UTC on 30 November is 01:30 on 1 December in Jerusalem.
LATE_EVENING_UTC = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)


@pytest.fixture
def jerusalem(session, gym):
    make_billing_settings(session, gym.organization, timezone=JERUSALEM)
    return gym


@pytest.mark.embedded
def test_the_membership_ended_email_tells_the_end_day_in_the_gyms_calendar(
    session, session_factory, jerusalem, doors, mailbox
):
    subscription = make_subscription(session, jerusalem, current_period_end=LATE_EVENING_UTC)
    give_notice(session, jerusalem, subscription)
    session.commit()
    period_end_sweep(session_factory, doors, now=LATE_EVENING_UTC + timedelta(minutes=5))
    [email] = read_mailbox(mailbox)
    assert "ended on 2026-12-01," in email.get_content()


@pytest.mark.embedded
def test_the_digest_tells_when_each_plan_ends_in_the_gyms_calendar(
    session, session_factory, jerusalem, mailer, mailbox
):
    subscription = make_subscription(session, jerusalem, current_period_end=LATE_EVENING_UTC)
    give_notice(session, jerusalem, subscription)
    session.commit()
    digest.send_digests(session_factory, mailer, now=NOW)
    [email] = read_mailbox(mailbox)
    assert "cancellation_notice, ends 2026-12-01" in email.get_content()


@pytest.mark.embedded
def test_a_presale_withdrawal_is_dated_the_day_it_was_withdrawn_in_the_gyms_calendar(
    session, jerusalem, mailer, mailbox
):
    plan = make_plan(session, jerusalem.organization, name="Founders", purchases_count=1)
    subscription = make_subscription(
        session, jerusalem, plan=plan, presale_opening=NOW + timedelta(days=14)
    )
    _, case = presales.withdraw_presale(
        session,
        jerusalem.organization.id,
        subscription.id,
        actor_user_id=jerusalem.member.id,
        by_member=True,
        locale="en",
        now=LATE_EVENING_UTC,
    )
    # The mail server refused it then; the presale cases pass sends it two days later.
    presales.notify_case(session, mailer, case, now=LATE_EVENING_UTC + timedelta(days=2))
    [email] = read_mailbox(mailbox)
    assert " on 2026-12-01 (by the member)" in email.get_content()


@pytest.mark.embedded
def test_a_declined_presale_is_dated_the_day_of_its_decline_in_the_gyms_calendar(
    session, jerusalem, mailer, mailbox
):
    plan = make_plan(session, jerusalem.organization, name="Founders", purchases_count=1)
    subscription = make_subscription(
        session, jerusalem, plan=plan, presale_opening=LATE_EVENING_UTC
    )
    subscription.status = "debt"
    subscription.debt_since = LATE_EVENING_UTC
    subscription.debt_amount_in_cents = subscription.price_in_cents
    subscription.retention_case_kind = "presale_charge_failed"
    session.flush()
    presales.open_charge_failed_cases(session, now=LATE_EVENING_UTC)
    [case] = session.scalars(select(RetentionCase)).all()
    presales.notify_case(session, mailer, case, now=LATE_EVENING_UTC)
    [email] = read_mailbox(mailbox)
    assert "was declined on 2026-12-01." in email.get_content()
