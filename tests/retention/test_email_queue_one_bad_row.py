"""The staff emails the retention sweeps send one row at a time (presale cases, the daily
digest): a row whose email cannot be built (a plan or gym name holding a line break, which no
mail header may carry) once stopped the whole pass with a ValueError. The rows are taken oldest
first, so the same row stopped every later pass and nothing behind it was ever sent. A subject
is one line now, and a row's unexpected failure holds back no other row."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models.billing import SubscriptionStatus
from gymctl.providers.mail import read_mailbox
from gymctl.retention import digest, presales
from tests import factories
from tests.billing.factories import make_gym, make_plan, make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded

OPENING = NOW + timedelta(days=14)


def _declined_presale(session, gym, plan_name: str) -> None:
    plan = make_plan(session, gym.organization, name=plan_name)
    membership = factories.membership(
        session, user=factories.user(session), organization=gym.organization
    )
    subscription = make_subscription(
        session, gym, plan=plan, membership=membership, presale_opening=OPENING
    )
    subscription.status = SubscriptionStatus.debt
    subscription.debt_since = OPENING
    subscription.retention_case_kind = "presale_charge_failed"


def test_a_presale_case_whose_plan_name_breaks_a_line_holds_back_no_other_case(
    session, session_factory, gym, mailer, mailbox
):
    _declined_presale(session, gym, "Founders\rclub")  # the oldest case: emailed first
    session.flush()
    _declined_presale(session, gym, "Regulars")
    session.commit()

    done = presales.presale_cases_pass(session_factory, mailer, now=OPENING + timedelta(hours=1))

    assert done == {"opened": 2, "notified": 2}
    subjects = sorted(email["Subject"] for email in read_mailbox(mailbox))
    assert len(subjects) == 2
    assert any("(Founders club)" in subject for subject in subjects)
    assert any("(Regulars)" in subject for subject in subjects)


def test_a_case_whose_email_fails_unexpectedly_holds_back_no_other_case(
    session, session_factory, gym, mailer, mailbox, monkeypatch
):
    """Whatever the fault (a template, a row gone), the pass logs it and goes on; the case
    stays unsent and is tried again next pass."""
    _declined_presale(session, gym, "Founders")
    session.flush()
    _declined_presale(session, gym, "Regulars")
    session.commit()
    real = presales.notify_case

    def notify(session, mailer, case, *, now):
        plan = session.get(
            presales.Plan, session.get(presales.Subscription, case.subscription_id).plan_id
        )
        if plan.name == "Founders":
            raise RuntimeError("a fault of this row only")
        return real(session, mailer, case, now=now)

    monkeypatch.setattr(presales, "notify_case", notify)
    at = OPENING + timedelta(hours=1)
    assert presales.presale_cases_pass(session_factory, mailer, now=at)["notified"] == 1
    monkeypatch.undo()
    assert presales.presale_cases_pass(session_factory, mailer, now=at)["notified"] == 1
    assert len(read_mailbox(mailbox)) == 2


def test_a_gym_whose_name_breaks_a_line_holds_back_no_other_gyms_digest(
    session, session_factory, gym, mailer, mailbox
):
    gym.organization.name = "North\rside"
    give_notice(session, gym, make_subscription(session, gym))  # the oldest case: first gym
    other = make_gym(session)
    give_notice(
        session,
        other,
        make_subscription(session, other),
        actor_user_id=other.member.id,
        now=NOW + timedelta(minutes=1),
    )
    session.commit()

    assert digest.send_digests(session_factory, mailer, now=NOW + timedelta(hours=3)) == {
        "orgsChecked": 2,
        "sent": 2,
    }
    subjects = sorted(email["Subject"] for email in read_mailbox(mailbox))
    assert subjects == sorted(
        [f"{other.organization.name}: 1 open retention case", "North side: 1 open retention case"]
    )
