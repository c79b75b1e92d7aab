"""Member-facing billing emails (spec B 3, 6): the member hears of their debt when it opens, of
the cancellation for non-payment, and of a presale's failed opening-day charge, each once, in
their language; a failed handover is retried."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import collector
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.db import get_engine, session_factory
from gymctl.models import MemberEmail
from gymctl.models.billing import PlanType
from gymctl.providers.mail import MailboxMailer, MailError, read_mailbox
from gymctl.retention.billing_emails import send_billing_emails
from gymctl.retention.notices import REASON_CODES
from gymctl.retention.settlement import period_end_sweep
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import DECLINE, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded


def send(session, session_factory, mailer, *, now):
    """The sweep as the daemon runs it: on what the test's session wrote, in transactions of its
    own."""
    session.commit()
    return send_billing_emails(session_factory, mailer, now=now)


def _bodies(mailbox) -> list[tuple[str, str]]:
    return [(m["Subject"], m.get_content()) for m in read_mailbox(mailbox)]


def test_debt_opened_then_cancelled_for_non_payment_each_email_the_member_once(
    session, session_factory, gym, mailer, mailbox
):
    subscription = bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)

    assert send(session, session_factory, mailer, now=NOW) == {
        "sent": 1,
        "failed": 0,
        "skipped": 0,
        "givenUp": 0,
    }
    assert send(session, session_factory, mailer, now=NOW)["sent"] == 0
    [(subject, body)] = _bodies(mailbox)
    assert subject == f"A payment to {gym.organization.name} is outstanding"
    # day 0 = Nov 21, day 7 = Nov 28: the last day to pay
    assert "You owe 80.00 ILS. Please pay it by 2026-11-28" in body
    assert "prepaid period" in body

    later = NOW + timedelta(days=8)
    run_lifecycle(session, now=later)
    assert send(session, session_factory, mailer, now=later)["sent"] == 1
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

    counts = send(session, session_factory, mailer, now=NOW)

    assert counts == {
        "sent": 1,
        "failed": 0,
        "skipped": 1,
        "givenUp": 0,
    }  # the debt notice is covered
    [(subject, body)] = _bodies(mailbox)
    assert subject == f"Your opening-day payment to {gym.organization.name} did not go through"
    assert "99.00 ILS" in body


def test_the_member_reads_it_in_the_language_of_their_notice_and_a_failure_is_retried(
    session, session_factory, gym, mailer, mailbox
):
    subscription = bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    give_notice(session, gym, subscription, locale="es", now=NOW - timedelta(days=20))
    subscription.cancel_at_period_end = False  # the lifecycle leaves notice rows to their sweep
    run_lifecycle(session, now=NOW)

    class Down:
        def send(self, email):
            raise MailError("smtp down")

    assert send(session, session_factory, Down(), now=NOW) == {
        "sent": 0,
        "failed": 1,
        "skipped": 0,
        "givenUp": 0,
    }
    assert session.scalars(select(MemberEmail)).all() == []
    assert send(session, session_factory, mailer, now=NOW)["sent"] == 1
    [(subject, _)] = _bodies(mailbox)
    assert subject == f"Tienes un pago pendiente con {gym.organization.name}"


def test_notices_older_than_the_lookback_are_not_mailed(
    session, session_factory, gym, mailer, mailbox
):
    bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
    run_lifecycle(session, now=NOW)

    assert send(session, session_factory, mailer, now=NOW + timedelta(days=3))["sent"] == 0
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


class Counting:
    """Hands each email to `mailer`; the `stop_at`-th one stops the process instead (a
    daemon killed midway: not a mail failure the sweep catches)."""

    def __init__(self, mailer, stop_at: int | None = None) -> None:
        self.mailer, self.stop_at, self.sent = mailer, stop_at, 0

    def send(self, email):
        if self.sent + 1 == self.stop_at:
            raise SystemExit("the daemon was stopped")
        self.sent += 1
        return self.mailer.send(email)


def test_a_run_stopped_midway_keeps_the_emails_it_sent(committed_database, mailer, mailbox):
    """Each email is a transaction of its own, committed for real on both engines: a run
    killed at its third email has recorded the two it sent, and the next run sends only the
    rest. In one transaction for the batch, the kill rolled back both records and the next run
    emailed those members again."""
    factory = session_factory(get_engine(committed_database))
    _four_members_in_debt(factory)

    with pytest.raises(SystemExit):
        send_billing_emails(factory, Counting(mailer, stop_at=3), now=NOW)
    assert len(read_mailbox(mailbox)) == 2
    with factory() as session:
        assert len(session.scalars(select(MemberEmail)).all()) == 2

    assert send_billing_emails(factory, Counting(mailer), now=NOW) == {
        "sent": 2,
        "failed": 0,
        "skipped": 0,
        "givenUp": 0,
    }
    recipients = [m["To"] for m in read_mailbox(mailbox)]
    assert len(recipients) == len(set(recipients)) == 4  # each member once


def test_a_notice_that_fails_holds_back_no_other(committed_database, mailer, mailbox):
    """Any fault of one notice (here its handover raises something no mailer should) is that
    notice's: logged, retried next run; the notices after it are sent."""
    factory = session_factory(get_engine(committed_database))
    _four_members_in_debt(factory)

    class BrokenOnce:
        broke = False

        def send(self, email):
            if not self.broke:
                self.broke = True
                raise ValueError("a template bug")
            return mailer.send(email)

    assert send_billing_emails(factory, BrokenOnce(), now=NOW) == {
        "sent": 3,
        "failed": 1,
        "skipped": 0,
        "givenUp": 0,
    }
    assert send_billing_emails(factory, mailer, now=NOW)["sent"] == 1
    assert len({m["To"] for m in read_mailbox(mailbox)}) == 4


def _four_members_in_debt(factory) -> None:
    """Four members of one gym whose cash plans lapsed at NOW: four debt notices."""
    with factory() as session:
        gym = bf.make_gym(session)
        for _ in range(4):
            member = factories.membership(
                session, user=factories.user(session), organization=gym.organization
            )
            bf.make_subscription(
                session, gym, PlanType.cash, cash_prepaid_through=NOW, membership=member
            )
        run_lifecycle(session, now=NOW)
        session.commit()


def test_two_runs_at_once_email_each_notice_once(committed_pg, mailbox, clock):
    """The record is written before the handover: a second run that reached the same notice
    waits on its unique key while the first one's email is out, then finds it recorded."""
    factory = session_factory(get_engine(committed_pg))
    with factory() as session:
        gym = bf.make_gym(session)
        bf.make_subscription(session, gym, PlanType.cash, cash_prepaid_through=NOW)
        run_lifecycle(session, now=NOW)
        session.commit()
    out, release = threading.Event(), threading.Event()

    class Held:
        def send(self, email):
            out.set()
            assert release.wait(10)
            return MailboxMailer(mailbox, "gym <no-reply@gym.example>", clock=clock).send(email)

    results: dict[str, dict] = {}

    def run(name: str, through) -> None:
        results[name] = send_billing_emails(factory, through, now=NOW)

    first = threading.Thread(target=run, args=("first", Held()))
    second = threading.Thread(
        target=run, args=("second", MailboxMailer(mailbox, "x <x@x.example>", clock=clock))
    )
    first.start()
    try:
        assert out.wait(10)  # the first run's email is out, its record not yet committed
        second.start()
        second.join(0.5)
        assert second.is_alive()  # it waits on the notice's record
    finally:
        release.set()
        first.join(10)
        second.join(10)
    assert results == {
        "first": {"sent": 1, "failed": 0, "skipped": 0, "givenUp": 0},
        "second": {"sent": 0, "failed": 0, "skipped": 1, "givenUp": 0},
    }
    assert len(read_mailbox(mailbox)) == 1
