"""An email that can never be sent is given up, not retried: a presale case email with no
address to send it to, a membership-ended email whose recipient the mail server refuses for
good (5xx). They stayed pending for ever and, each queue taking its oldest rows first, enough
of them filled every batch and held back the emails behind them. Given up, each is recorded
(audit retention.email_given_up) and leaves its queue; a temporary refusal (4xx) is retried."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models import AuditLog, CancellationSettlement, MemberEmail
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.mail import SmtpMailer, read_mailbox
from gymctl.retention import presales, settlement
from gymctl.retention.billing_emails import send_billing_emails
from tests import factories
from tests.billing.factories import make_gym, make_plan, make_subscription
from tests.conftest import NOW
from tests.providers.test_mail import Recorder, start
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded

D = timedelta(days=1)
OPENING = NOW + 14 * D
REFUSED = "refused@members.example"


class Refusing(Recorder):
    """A mail server that answers `reply` to REFUSED at RCPT and takes everyone else."""

    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply = reply
        self.tries = 0

    async def handle_RCPT(self, server, session, envelope, address, options) -> str:
        if address == REFUSED:
            self.tries += 1
            return self.reply
        envelope.rcpt_tos.append(address)
        return "250 OK"


@pytest.fixture
def refusing(request):
    server = Refusing(request.param)
    controller = start(server)
    yield server, SmtpMailer(f"smtp://127.0.0.1:{controller.port}", "gym <no-reply@gym.example>")
    controller.stop()


def _given_up(session) -> list[AuditLog]:
    session.expire_all()
    return session.scalars(
        select(AuditLog).where(AuditLog.action == "retention.email_given_up")
    ).all()


def _declined_presale(session, gym) -> None:
    plan = make_plan(session, gym.organization, name="Founders")
    subscription = make_subscription(session, gym, plan=plan, presale_opening=OPENING)
    subscription.status = SubscriptionStatus.debt
    subscription.debt_since = OPENING
    subscription.retention_case_kind = "presale_charge_failed"


def test_a_presale_case_email_with_no_address_is_given_up_and_holds_back_no_other(
    session, session_factory, gym, mailer, mailbox
):
    at = OPENING + timedelta(hours=1)
    gym.owner.email = None  # nobody to tell at this gym: its case is the oldest
    _declined_presale(session, gym)
    assert presales.open_charge_failed_cases(session, now=at - timedelta(minutes=1)) == 1
    other = make_gym(session)
    _declined_presale(session, other)
    assert presales.open_charge_failed_cases(session, now=at) == 1
    session.commit()

    assert presales.notify_pending(session_factory, mailer, now=at, limit=1) == 0
    assert presales.notify_pending(session_factory, mailer, now=at, limit=1) == 1

    [email] = read_mailbox(mailbox)
    assert email["To"] == other.owner.email
    [record] = _given_up(session)
    assert (record.organization_id, record.target_type) == (gym.organization.id, "retention_case")
    assert record.data == {"email": "presale_charge_failed", "reason": "no_address"}
    assert not presales.cases_waiting(session)


def _two_ended_memberships(session, gym) -> None:
    """Two cash plans whose notices mature at NOW + D; the first member's address is refused."""
    refused = factories.membership(
        session, user=factories.user(session, email=REFUSED), organization=gym.organization
    )
    for membership in (refused, None):
        subscription = make_subscription(
            session, gym, PlanType.cash, current_period_end=NOW + 30 * D, membership=membership
        )
        give_notice(
            session,
            gym,
            subscription,
            initiator="staff",
            actor_user_id=gym.owner.id,
            reason_code="price",
            effective_at=NOW + D,
        )
    session.commit()


@pytest.mark.parametrize("refusing", ["550 no such user"], indirect=True)
def test_a_membership_ended_email_refused_for_good_is_given_up_not_retried(
    session, session_factory, gym, doors, refusing
):
    server, mailer = refusing
    _two_ended_memberships(session, gym)

    swept = settlement.period_end_sweep(session_factory, replace(doors, mailer=mailer), now=NOW + D)
    assert (len(swept.cancelled), swept.emailed) == (2, 1)
    for minutes in (5, 10):
        later = NOW + D + timedelta(minutes=minutes)
        assert settlement.send_pending_emails(session_factory, mailer, now=later, limit=1) == 0

    assert server.tries == 1  # never tried again
    assert len(server.envelopes) == 1
    session.expire_all()
    pending = session.scalars(
        select(CancellationSettlement).where(CancellationSettlement.email_sent_at.is_(None))
    ).all()
    assert pending == []
    [record] = _given_up(session)
    assert record.target_type == "cancellation_settlement"
    assert record.data["email"] == "membership_ended"
    assert "SMTPRecipientsRefused" in record.data["reason"]
    assert REFUSED not in str(record.data)


@pytest.mark.parametrize("refusing", ["450 mailbox busy, try later"], indirect=True)
def test_a_membership_ended_email_refused_for_now_is_retried(
    session, session_factory, gym, doors, refusing
):
    server, mailer = refusing
    _two_ended_memberships(session, gym)

    swept = settlement.period_end_sweep(session_factory, replace(doors, mailer=mailer), now=NOW + D)
    assert swept.emailed == 1
    later = NOW + D + timedelta(minutes=5)
    assert settlement.send_pending_emails(session_factory, mailer, now=later) == 0

    assert server.tries == 2
    session.expire_all()
    assert (
        len(
            session.scalars(
                select(CancellationSettlement).where(CancellationSettlement.email_sent_at.is_(None))
            ).all()
        )
        == 1
    )
    assert _given_up(session) == []


def _two_members_in_debt(session, gym) -> None:
    """Two cash members whose prepaid time ran out: the lifecycle opens each a debt, whose
    notice is a member billing email; the first member's address is refused."""
    for address in (REFUSED, "kept@members.example"):
        member = factories.membership(
            session, user=factories.user(session, email=address), organization=gym.organization
        )
        make_subscription(session, gym, PlanType.cash, membership=member, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)
    session.commit()


@pytest.mark.parametrize("refusing", ["550 no such user"], indirect=True)
def test_a_member_billing_email_refused_for_good_is_given_up_not_retried_for_its_lookback(
    session, session_factory, gym, refusing
):
    """The member billing emails keep each notice LOOKBACK (2 days) and retried a refused one
    every run for all of it; refused for good (5xx), it is recorded as not sent and given up."""
    server, mailer = refusing
    _two_members_in_debt(session, gym)

    first = send_billing_emails(session_factory, mailer, now=NOW)
    later = send_billing_emails(session_factory, mailer, now=NOW + timedelta(minutes=5))

    assert first == {"sent": 1, "failed": 0, "skipped": 0, "givenUp": 1}
    assert later == {"sent": 0, "failed": 0, "skipped": 0, "givenUp": 0}
    assert server.tries == 1  # never tried again
    session.expire_all()
    kept = session.scalars(select(MemberEmail).where(MemberEmail.sent_at.is_(None))).all()
    assert [row.kind for row in kept] == ["debt_opened"]  # recorded, not sent
    [record] = _given_up(session)
    assert record.target_type == "subscription"
    assert record.target_id == str(kept[0].subscription_id)
    assert record.data["email"] == "billing_debt_opened"
    assert REFUSED not in str(record.data)


@pytest.mark.parametrize("refusing", ["450 mailbox busy, try later"], indirect=True)
def test_a_member_billing_email_refused_for_now_is_retried(session, session_factory, gym, refusing):
    server, mailer = refusing
    _two_members_in_debt(session, gym)

    first = send_billing_emails(session_factory, mailer, now=NOW)
    send_billing_emails(session_factory, mailer, now=NOW + timedelta(minutes=5))

    assert first == {"sent": 1, "failed": 1, "skipped": 0, "givenUp": 0}
    assert server.tries == 2
    assert _given_up(session) == []
