"""A presale's charge-failure case closes with its plan (spec B 2.1, 3).

A presale whose opening-day charge was declined is in debt and gets a presale_charge_failed
case (the presale cases pass). Spec B 3: the debt's plan is cancelled for non-payment once the
grace has passed; a notice matures at the period-end sweep; a plan also ends by removal,
erasure or being superseded (`attempts.end_plan`). Each of those endings closed the plan's
notice case (`overtaken.end_overtaken_notice`, the sweep's `settle_one`) but never its presale
case: the case of a cancelled plan stayed in the open cases and the owner's digest for good.
Now every ending closes it in its own transaction, with the outcome that says why
(`overtaken.close_with_plan`): non-payment lost_payment, a matured notice the notice's own,
superseded saved_member_withdrew, any other ending the member lost.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import attempts, collector
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models import AuditLog, RetentionCase
from gymctl.models.billing import SubscriptionStatus
from gymctl.models.retention import CaseKind
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention import cases, presales
from gymctl.retention.settlement import Doors, period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import DECLINE, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import give_notice, log_contact

pytestmark = pytest.mark.embedded  # the demo gym sells presales and takes notices

OPENING = NOW + timedelta(days=3)
LATER = OPENING + timedelta(days=1)


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


def _declined_presale(session, session_factory, gym, sandbox):
    """A presale whose opening-day charge is declined, and the case the presale cases pass
    opens for it."""
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, DECLINE)
    subscription = bf.make_subscription(
        session, gym, presale_opening=OPENING, payment_method_id=method.id
    )
    session.commit()
    summary = collector.catch_up(session_factory, sandbox.provider, now=OPENING, cipher=TEST_CIPHER)
    assert summary.declined == 1
    assert presales.open_charge_failed_cases(session, now=OPENING) == 1
    session.commit()
    session.expire_all()
    assert subscription.status == SubscriptionStatus.debt
    case = session.scalar(select(RetentionCase))
    assert (case.kind, case.status) == (CaseKind.presale_charge_failed.value, "open")
    return subscription, case


def _closed(session, gym, case, outcome) -> None:
    session.expire_all()
    assert (case.status, case.outcome) == ("closed", outcome)
    assert cases.open_cases(session, gym.organization.id) == []  # nor in the owner's digest
    audit = session.scalar(select(AuditLog).where(AuditLog.action == "retention.case_closed"))
    assert (audit.target_id, audit.data["outcome"]) == (str(case.id), outcome)


def test_the_lifecycle_cancelling_a_declined_presale_for_non_payment_closes_its_case(
    session, session_factory, gym, sandbox
):
    subscription, case = _declined_presale(session, session_factory, gym, sandbox)

    summary = run_lifecycle(session, now=OPENING + timedelta(days=9))  # the grace is 7 days
    session.commit()

    assert summary["cancelled"] == 1
    assert subscription.cancellation_reason == "non_payment"
    _closed(session, gym, case, "lost_payment")


def test_a_matured_notice_closes_the_presale_case_with_the_notice_s_outcome(
    session, session_factory, gym, sandbox, mailer
):
    subscription, case = _declined_presale(session, session_factory, gym, sandbox)
    _, notice_case = give_notice(session, gym, subscription, now=LATER)  # in debt: ends now
    log_contact(session, gym, notice_case, at=LATER)
    session.commit()
    doors = Doors(
        provider=sandbox.provider,
        cipher=TEST_CIPHER,
        documents=LocalDocumentProvider(),
        mailer=mailer,
    )

    swept = period_end_sweep(session_factory, doors, now=LATER + timedelta(minutes=1))

    assert swept.cancelled == [str(subscription.id)]
    _closed(session, gym, case, "lost_contacted")
    assert (notice_case.status, notice_case.outcome) == ("closed", "lost_contacted")


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [(attempts.SUPERSEDED, "saved_member_withdrew"), ("membership_ended", "lost_no_contact")],
)
def test_a_plan_ended_at_once_closes_its_presale_case(
    session, session_factory, gym, sandbox, reason, outcome
):
    subscription, case = _declined_presale(session, session_factory, gym, sandbox)

    with session_factory() as worker:
        locked = attempts.lock_subscription(worker, subscription.id)
        attempts.end_plan(worker, locked, reason=reason, now=LATER)
        worker.commit()

    _closed(session, gym, case, outcome)
