"""The daily digest (RETENTION_DIGEST_SENT, once per organization and day) and the refund
task sweep (owner task due in 3 days, bumped when overdue) (spec B 3, 6, 8)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access import erasure
from gymctl.models import AuditLog, Role, Task
from gymctl.providers.mail import MailError, read_mailbox
from gymctl.retention import digest
from gymctl.retention.presales import withdraw_presale
from gymctl.retention.refund_tasks import bump_overdue_refund_tasks
from gymctl.tasks import file_task
from tests import factories
from tests.billing.factories import make_gym, make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice, log_contact


def send(session, session_factory, mailer, *, now):
    """The digest as the daemon sends it: on what the test's session wrote, a gym per
    transaction of its own."""
    session.commit()
    return digest.send_digests(session_factory, mailer, now=now)


def _notice(session, gym, **fields):
    return give_notice(session, gym, make_subscription(session, gym, **fields))[1]


@pytest.mark.embedded
def test_the_digest_goes_to_owners_and_admins_once_a_day(
    session, session_factory, gym, mailer, mailbox
):
    admin = factories.user(session, name="Dana Admin")
    factories.membership(session, user=admin, organization=gym.organization, role=Role.admin)
    coach = factories.user(session)
    factories.membership(session, user=coach, organization=gym.organization, role=Role.coach)
    gym.member.name = "Noa Member"
    case = _notice(session, gym, current_period_end=NOW + timedelta(days=20))
    log_contact(session, gym, case, channel="email")
    make_gym(session)  # no open cases: not checked, no digest
    at = NOW + timedelta(hours=3)
    assert send(session, session_factory, mailer, now=at) == {"orgsChecked": 1, "sent": 1}
    sent = read_mailbox(mailbox)
    assert sorted(message["To"] for message in sent) == sorted([gym.owner.email, admin.email])
    body = sent[0].get_content()
    assert sent[0]["Subject"] == f"{gym.organization.name}: 1 open retention case"
    assert "Noa Member: cancellation_notice, ends " in body
    assert "no contact yet" not in body
    [audit] = session.scalars(
        select(AuditLog).where(AuditLog.action == "RETENTION_DIGEST_SENT")
    ).all()
    assert audit.data == {"day": at.date().isoformat(), "openCases": 1, "recipients": 2}

    assert send(session, session_factory, mailer, now=at + timedelta(hours=5)) == {
        "orgsChecked": 1,
        "sent": 0,
    }
    tomorrow = at + timedelta(days=1)
    assert send(session, session_factory, mailer, now=tomorrow)["sent"] == 1


def test_a_digest_that_was_not_handed_over_is_sent_by_the_next_run(
    session, session_factory, gym, mailer
):
    _notice(session, gym)

    class Down:
        def send(self, email):
            raise MailError("SMTP smtp://127.0.0.1:1 failed: ConnectionRefusedError")

    assert send(session, session_factory, Down(), now=NOW)["sent"] == 0
    assert (
        session.scalar(select(AuditLog).where(AuditLog.action == "RETENTION_DIGEST_SENT")) is None
    )
    assert send(session, session_factory, mailer, now=NOW)["sent"] == 1


@pytest.mark.embedded
def test_a_run_stopped_midway_keeps_the_digests_it_sent(session, session_factory, mailer, mailbox):
    """A gym per transaction: a run killed at the second gym's digest has recorded the first
    one's, and the next run sends only the second's. In one transaction for every gym, the
    kill forgot the first and its owner got the day's digest twice."""
    gyms = [make_gym(session) for _ in range(2)]
    for gym in gyms:
        _notice(session, gym)

    class StopsAtTheSecond:
        sent = 0

        def send(self, email):
            if self.sent == 1:
                raise SystemExit("the daemon was stopped")
            self.sent += 1
            return mailer.send(email)

    with pytest.raises(SystemExit):
        send(session, session_factory, StopsAtTheSecond(), now=NOW)
    assert len(read_mailbox(mailbox)) == 1
    assert send(session, session_factory, mailer, now=NOW) == {"orgsChecked": 2, "sent": 1}
    recipients = sorted(message["To"] for message in read_mailbox(mailbox))
    assert recipients == sorted(gym.owner.email for gym in gyms)  # each owner once


def _refund_task(session, gym, due):
    return file_task(
        session,
        organization_id=gym.organization.id,
        kind="manual_refund",
        subject_type="subscription",
        subject_id="s-1",
        title="Refund owed",
        priority="high",
        due_at=due,
        now=NOW,
    )


def test_an_overdue_refund_task_is_bumped_once_per_overdue_period(session, gym):
    task = _refund_task(session, gym, NOW + timedelta(days=3))
    assert bump_overdue_refund_tasks(
        session, now=NOW + timedelta(days=3) - timedelta(seconds=1)
    ) == {"bumped": []}
    at = NOW + timedelta(days=3)
    assert bump_overdue_refund_tasks(session, now=at) == {"bumped": [str(task.id)]}
    assert (task.due_at, task.priority, task.data["bumps"]) == (at + timedelta(days=3), "urgent", 1)
    assert bump_overdue_refund_tasks(session, now=at) == {"bumped": []}
    assert bump_overdue_refund_tasks(session, now=at + timedelta(days=3))["bumped"] == [
        str(task.id)
    ]
    assert task.data["bumps"] == 2


def test_done_tasks_and_other_kinds_are_not_bumped(session, gym):
    task = _refund_task(session, gym, NOW)
    task.status = "done"
    file_task(
        session,
        organization_id=gym.organization.id,
        kind="cancellation_review",
        subject_type="retention_case",
        subject_id="c-1",
        title="Review",
        priority="urgent",
        due_at=NOW,
        now=NOW,
    )
    assert bump_overdue_refund_tasks(session, now=NOW + timedelta(days=9)) == {"bumped": []}
    assert session.scalar(select(Task).where(Task.kind == "cancellation_review")).due_at == NOW


@pytest.mark.embedded
def test_the_digest_names_a_member_the_gym_erased_as_erased(
    session, session_factory, gym, mailer, mailbox
):
    """A case left open (a presale withdrawn, then the member erased) is still staff's to
    close, but the digest shows the member as the gym's views do after an erasure
    (access.erased): the person's login row keeps their name, this gym no longer does."""
    gym.member.name = "Noa Member"
    presale = make_subscription(session, gym, presale_opening=NOW + timedelta(days=10))
    withdraw_presale(
        session,
        gym.organization.id,
        presale.id,
        actor_user_id=gym.member.id,
        by_member=True,
        locale="en",
        now=NOW,
    )
    erasure.erase_personal_data(
        session, gym.organization, gym.member.id, actor_user_id=gym.owner.id, now=NOW
    )

    assert send(session, session_factory, mailer, now=NOW + timedelta(hours=3))["sent"] == 1
    body = read_mailbox(mailbox)[-1].get_content()
    assert "Erased member: presale_withdrawal" in body
    assert "Noa Member" not in body
    assert gym.member.email not in body
