"""A cancellation settlement owed by hand and the credit notes of its charge (hunters' tests of
s55; spec B 4.3: one cap covers refunds and credit notes; decisions s45, s52).

- A credit note kept as credit (cashReturned false) filed after a settlement that left the
  owner a refund to make took the room that refund needed: the owner's refund was then refused
  (refund_exceeds_remaining) and the manual_refund task bumped for ever. It now leaves it.
- A cash credit note dated by its request's clock before the sweep's instant and committed
  after the settlement (it waited for the charge) was not counted as money back: the task
  asked for 7,300 of a payment of which 500 was left. The settlement keeps the ids of the
  refunds it counted; any other given back counts.
- On PostgreSQL a credit note locked the charge and then waited (its insert's foreign key) on
  the subscription the settlement held, which waited on the charge: "deadlock detected". A
  refund or a credit note now takes billing's order (organization, subscription, payment)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl import ids
from gymctl.billing.credit_notes import CreditNoteRequest, file_credit_note
from gymctl.billing.refunds import _refunded, begin_refund
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import CancellationSettlement, PaymentTransaction, Task
from gymctl.models.billing import PlanType, TransactionStatus, TransactionType
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.settlement import period_end_sweep
from tests.billing import factories as bf
from tests.billing.factories import make_subscription, make_transaction
from tests.conftest import NOW
from tests.lock_order import meeting
from tests.retention.conftest import staff_notice

D = timedelta(days=1)


def _credit_note(session, gym, sale_id, amount, at, *, cash_returned):
    return file_credit_note(
        session,
        organization_id=gym.organization.id,
        sale_id=sale_id,
        request=CreditNoteRequest(uuid.uuid4(), amount, cash_returned),
        actor_user_id=gym.owner.id,
        now=at,
        documents=LocalDocumentProvider(),
    )


def _a_year_paid_in_cash_ending_at(session, gym, effective):
    """36,500 paid in cash for a year of which 73 days are left at `effective` (7,300 owed)."""
    subscription = bf.make_subscription(
        session, gym, PlanType.cash, current_period_end=effective + 73 * D, price_in_cents=36500
    )
    charge = bf.make_transaction(
        session, gym, subscription_id=subscription.id, method="cash", amount_in_cents=36500,
        now=effective - 30 * D,
    )  # fmt: skip
    staff_notice(session, gym, subscription, effective, now=effective - D)
    session.commit()
    return charge.id


def _task(session) -> Task:
    session.expire_all()
    return session.scalar(select(Task).where(Task.kind == "manual_refund"))


@pytest.mark.embedded
def test_a_credit_kept_after_a_settlement_leaves_room_for_the_refund_the_owner_owes(
    session, session_factory, gym, doors
):
    charge_id = _a_year_paid_in_cash_ending_at(session, gym, NOW)
    period_end_sweep(session_factory, doors, now=NOW)
    settled = session.scalar(select(CancellationSettlement))
    assert (settled.amount_in_cents, settled.execution) == (7300, "owner_task")

    with pytest.raises(DomainError) as refused:
        _credit_note(session, gym, charge_id, 30000, NOW + D, cash_returned=False)
    assert (refused.value.code, refused.value.status) == ("credit_note_amount_exceeds_cap", 409)
    assert refused.value.details["remainingInCents"] == 36500 - 7300
    session.rollback()
    _credit_note(session, gym, charge_id, 29200, NOW + D, cash_returned=False)  # what is left
    session.commit()

    begin_refund(
        session, transaction=session.get(PaymentTransaction, charge_id), amount_cents=7300,
        reason="refund owed after the cancellation", actor_user_id=gym.owner.id,
        now=NOW + 2 * D, documents=LocalDocumentProvider(),
    )  # fmt: skip
    session.commit()
    assert _task(session).status == "done"


@pytest.mark.embedded
def test_cash_given_back_that_the_settlement_did_not_count_completes_it_whatever_its_date(
    session, session_factory, gym, doors
):
    charge_id = _a_year_paid_in_cash_ending_at(session, gym, NOW)
    period_end_sweep(session_factory, doors, now=NOW)
    assert _task(session).data["amountInCents"] == 7300

    # The desk's request read its clock five seconds before the sweep's instant.
    _credit_note(session, gym, charge_id, 7300, NOW - timedelta(seconds=5), cash_returned=True)
    session.commit()

    assert _task(session).status == "done"
    settled = session.scalar(select(CancellationSettlement))
    assert settled.execution == "refunded"


def test_a_settlement_and_a_credit_note_of_its_charge_at_once_both_commit(
    committed_pg, card_server, doors
):
    """PostgreSQL, committed for real: the sweep holds the subscription when the desk files a
    cash credit note of its charge. Paused where the old order met (the sweep at its
    settlement's insert, the note at its own), the note now waits for the subscription before
    that: both commit, and the cash the note gave back completes the settlement's task."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session, card_provider_since=NOW - 400 * D)
        charge_id = _a_year_paid_in_cash_ending_at(session, gym, NOW)
    reached, errors, swept = threading.Event(), [], []

    def at_insert(table):
        def matches(statement, _parameters):
            if statement.lstrip().startswith(f"INSERT INTO {table} "):
                reached.set()
                return True
            return False

        return matches

    def sweep():
        swept.append(period_end_sweep(factory, doors, now=NOW))

    def note():
        reached.wait(10)  # the sweep holds the subscription by now
        with factory() as session:
            _credit_note(session, gym, charge_id, 36000, NOW, cash_returned=True)
            session.commit()

    def run(flow):
        try:
            flow()
        except Exception as error:  # reported below
            errors.append(error)

    waits = {
        "sweep": at_insert("cancellation_settlements"),
        "note": at_insert("payment_transactions"),
    }
    with meeting(engine, waits, timeout=2.0):
        threads = [threading.Thread(target=run, args=(f,), name=f.__name__) for f in (sweep, note)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    assert errors == []
    assert swept[0].cancelled != [], swept
    assert swept[0].errors == 0, swept
    with factory() as session:
        settled = session.scalar(select(CancellationSettlement))
        assert (settled.amount_in_cents, settled.execution) == (7300, "refunded")
        assert _task(session).status == "done"


@pytest.mark.embedded
def test_a_refund_in_flight_at_settlement_is_not_the_owed_refund(
    session, session_factory, gym, doors
):
    """A staff refund on its way when the settlement is written (the settlement's amount
    already took it off, `left_of`) is not money back towards what it owes once it completes
    (the session's reviewer): the owner's task closed with nothing of it returned."""
    subscription = make_subscription(
        session, gym, PlanType.card, current_period_end=NOW + 73 * D, price_in_cents=36500
    )
    charge = make_transaction(
        session,
        gym,
        subscription_id=subscription.id,
        provider="card_provider",
        method="card",
        amount_in_cents=36500,
        provider_transaction_id="deal-1",
    )
    # A staff card refund of 10,000 whose step 1 committed; the provider has not answered yet.
    pending = PaymentTransaction(
        id=ids.new_id(),
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        user_id=gym.member.id,
        type=TransactionType.refund,
        status=TransactionStatus.refund_pending,
        provider="card_provider",
        method="card",
        amount_in_cents=10000,
        currency="ILS",
        metadata_={
            "source": "refund",
            "refundedTransactionId": str(charge.id),
            "cashReturned": False,
        },
        created_at=NOW - D,
        updated_at=NOW - D,
    )
    session.add(pending)
    charge.status = TransactionStatus.refund_pending
    staff_notice(session, gym, subscription, NOW)
    session.commit()
    period_end_sweep(session_factory, doors, now=NOW)
    session.expire_all()
    settlement = session.scalar(select(CancellationSettlement))
    owed = settlement.amount_in_cents
    assert settlement.execution in ("owner_task", "refund_failed"), settlement.execution
    assert owed > 0
    # The staff refund completes (execute_refund's approved branch).
    pending = session.get(PaymentTransaction, pending.id)
    charge = session.get(PaymentTransaction, charge.id)
    _refunded(session, pending, charge, "ref-1", now=NOW + D, documents=LocalDocumentProvider())
    session.commit()
    session.expire_all()
    settlement = session.scalar(select(CancellationSettlement))
    task = session.scalar(select(Task).where(Task.kind == "manual_refund"))
    # Nothing of the settlement's amount went back: the staff refund was taken off it already.
    assert settlement.execution != "refunded", settlement.detail
    assert task.status == "open"
