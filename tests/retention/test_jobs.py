"""The daemon's jobs of this area, run once through the real runner (advisory lock, one
transaction or the job's own), each calling the same sweep as the hooks and the CLI."""

from __future__ import annotations

from datetime import timedelta

from pydantic import SecretStr
from sqlalchemy import select

from daemons.jobs import select_jobs
from daemons.runner import run_job_once
from gymctl.bookings import book, schedule
from gymctl.config import Settings
from gymctl.models import Booking, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.mail import read_mailbox
from tests.billing.factories import TEST_KEY, make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice

NAMES = [
    "retention_escalation",
    "retention_presale_cases",
    "retention_digest",
    "cancellation_sweep",
    "refund_task_sweep",
    "booking_no_shows",
    "billing_member_emails",
]


def _run(job, session_factory, settings):
    """Through the runner; a job with its own transactions is called as the runner calls it
    (the runner's lock-holding session would share this test's connection and roll its
    savepoints back; tests/test_daemons.py covers that path on committed data)."""
    if job.own_transactions:
        return job.run(session_factory, NOW, settings)
    outcome = run_job_once(job, session_factory=session_factory, settings=settings, now=NOW,
                           tick=None)  # fmt: skip
    assert outcome.status == "ok", (job.name, outcome)
    return outcome.result


def test_each_job_runs_its_sweep_and_a_second_run_does_nothing(
    session, session_factory, gym, tmp_path
):
    settings = Settings(
        GYMCTL_ENV="test",
        GYMCTL_HOME=str(tmp_path),
        GYMCTL_BILLING_ENCRYPTION_KEY=SecretStr(TEST_KEY).get_secret_value(),
    )
    ending = make_subscription(session, gym, PlanType.cash, current_period_end=NOW)
    give_notice(session, gym, ending, now=NOW - timedelta(days=3))
    kind = schedule.create_class_type(
        session,
        gym.organization.id,
        name="HIIT",
        default_capacity=5,
        duration_minutes=30,
        now=NOW - timedelta(days=1),
    )
    row = schedule.schedule_session(
        session, kind, starts_at=NOW - timedelta(hours=2), now=NOW - timedelta(days=1)
    )
    booked = book.book(
        session,
        gym.organization.id,
        row.id,
        gym.membership,
        actor_user_id=gym.member.id,
        now=NOW - timedelta(days=1),
    )
    session.commit()

    expected_first = {
        "retention_escalation": {"checked": 1, "escalated": 2},
        "retention_presale_cases": {"opened": 0, "notified": 0},
        "retention_digest": {"orgsChecked": 1, "sent": 1},
        "refund_task_sweep": {"bumped": []},
        "booking_no_shows": {"sessions": 1, "noShows": 1, "waitlistsClosed": 0},
    }
    for job in select_jobs(NAMES):
        first = _run(job, session_factory, settings)
        if job.name in expected_first:
            assert first == expected_first[job.name], job.name
    session.expire_all()
    assert session.get(Subscription, ending.id).status == SubscriptionStatus.cancelled
    assert session.scalar(select(Booking.no_show_at).where(Booking.id == booked.id)) == NOW
    assert len(read_mailbox(settings.mailbox_path)) == 2  # the digest to the owner, the ended email

    for job in select_jobs(NAMES):
        result = _run(job, session_factory, settings)
        assert not any(
            value for key, value in result.items() if key not in ("checked", "orgsChecked")
        ), (job.name, result)


def test_a_digest_the_mail_server_refused_at_seven_is_sent_later_that_day(
    session, session_factory, gym, tmp_path
):
    """'A mail failure unclaims its organization's day (the next run retries it)': the job ran
    once a day, and the next run claimed the next day, so a refused day's digest was never
    sent. It runs every hour from 07:00 UTC (each gym's day is claimed once)."""
    (job,) = select_jobs(["retention_digest"])
    home = {
        "GYMCTL_ENV": "test",
        "GYMCTL_HOME": str(tmp_path),
        "GYMCTL_BILLING_ENCRYPTION_KEY": TEST_KEY,
    }
    settings = Settings(**home)
    down = Settings(**home, GYMCTL_SMTP_URL="smtp://127.0.0.1:1")
    give_notice(session, gym, make_subscription(session, gym, PlanType.cash))
    session.commit()
    seven = NOW.replace(hour=7)

    assert job.run(session_factory, seven - timedelta(hours=1), settings)["sent"] == 0  # not yet
    assert job.run(session_factory, seven, down)["sent"] == 0  # refused: the day unclaimed
    step = timedelta(seconds=job.interval_seconds)
    again = seven + step
    assert again.date() == seven.date()
    assert job.run(session_factory, again, settings)["sent"] == 1
    assert job.run(session_factory, again + step, settings)["sent"] == 0  # once a day
    assert len(read_mailbox(settings.mailbox_path)) == 1
