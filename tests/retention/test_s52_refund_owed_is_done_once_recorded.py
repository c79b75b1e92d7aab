"""s52: the refund a settlement asks the owner for is done once the ledger records it.

A settlement that cannot refund by itself (a cash payment, a card refund the provider refused)
files the owner a manual_refund task. No door closes a task by hand: when the owner recorded the
refund (the refund route, `billing.refunds`), the task stayed open, the refund task sweep
bumped it urgent every three days for ever, and the settlement still read "owner_task": the
ledger said the member was paid, the task asked to pay them again."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.credit_notes import CreditNoteRequest, file_credit_note
from gymctl.billing.refunds import begin_refund
from gymctl.models import CancellationSettlement, Task
from gymctl.models.billing import PlanType
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.refund_tasks import bump_overdue_refund_tasks
from gymctl.retention.settlement import period_end_sweep
from tests.billing.factories import make_subscription, make_transaction
from tests.conftest import NOW
from tests.retention.conftest import staff_notice

D = timedelta(days=1)


def _settled_cash_plan(session, session_factory, gym, doors):
    subscription = make_subscription(
        session, gym, PlanType.cash, current_period_end=NOW + 73 * D, price_in_cents=36500
    )
    charge = make_transaction(
        session, gym, subscription_id=subscription.id, method="cash", amount_in_cents=36500
    )
    staff_notice(session, gym, subscription, NOW)
    session.commit()
    period_end_sweep(session_factory, doors, now=NOW)
    return charge


def _refund(session, charge, amount, at):
    begin_refund(
        session,
        transaction=charge,
        amount_cents=amount,
        reason="cash returned at the desk",
        actor_user_id=None,
        now=at,
        documents=LocalDocumentProvider(),
    )
    session.commit()


def _task(session):
    return session.scalar(select(Task).where(Task.kind == "manual_refund"))


@pytest.mark.embedded
def test_the_owed_refund_recorded_closes_the_task_and_the_settlement(
    session, session_factory, gym, doors
):
    charge = _settled_cash_plan(session, session_factory, gym, doors)
    assert _task(session).status == "open"
    _refund(session, charge, 7300, NOW + D)
    session.expire_all()
    assert _task(session).status == "done"
    settlement = session.scalar(select(CancellationSettlement))
    assert settlement.execution == "refunded"
    assert bump_overdue_refund_tasks(session, now=NOW + 10 * D) == {"bumped": []}


def _credit_note(session, gym, charge, amount, at, *, cash_returned):
    file_credit_note(
        session,
        organization_id=gym.organization.id,
        sale_id=charge.id,
        request=CreditNoteRequest(uuid.uuid4(), amount, cash_returned),
        actor_user_id=gym.owner.id,
        now=at,
        documents=LocalDocumentProvider(),
    )
    session.commit()


@pytest.mark.embedded
def test_what_gives_back_less_leaves_the_owed_refund_asked(session, session_factory, gym, doors):
    charge = _settled_cash_plan(session, session_factory, gym, doors)
    _refund(session, charge, 1000, NOW + D)
    _credit_note(session, gym, charge, 5000, NOW + D, cash_returned=False)  # a document only
    session.expire_all()
    assert _task(session).status == "open"
    assert session.scalar(select(CancellationSettlement)).execution == "owner_task"
    # The rest in cash against a credit note: what was owed went back.
    _credit_note(session, gym, charge, 6300, NOW + 2 * D, cash_returned=True)
    session.expire_all()
    assert _task(session).status == "done"
    assert session.scalar(select(CancellationSettlement)).execution == "refunded"
