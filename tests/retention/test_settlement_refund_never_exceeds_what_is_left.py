"""A settlement never owes more than is left of the payment (spec B 8: proration "capped at
the charge (and what is left of it)"; notes/billing.md, Lago: "refund <= paid - refunded").

A refund staff started on the period's charge and whose outcome is not known yet
(refund_pending: the provider may have paid it) is money on its way back. The settlement read
only the refunds completed, so it owed the member the whole prorated amount; its card refund
was refused (refund_in_progress) and became an owner task to return that amount by hand: with
the staff refund completing, the member got back more than they paid."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.refunds import begin_refund, execute_refund
from gymctl.models import CancellationSettlement, Task
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.settlement import period_end_sweep
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import give_notice, paid_card_subscription

D = timedelta(days=1)


@pytest.mark.embedded
def test_a_staff_refund_in_flight_is_taken_off_what_the_settlement_owes(
    session, session_factory, gym, card_server, doors
):
    subscription, charge = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 40 * D
    )
    give_notice(session, gym, subscription, now=NOW - 30 * D)
    subscription.cancellation_effective_at = NOW  # owed: 36500 x 40 / 365 = 4000
    staff_refund = begin_refund(
        session,
        transaction=charge,
        amount_cents=35000,
        reason="goodwill",
        actor_user_id=gym.owner.id,
        now=NOW - D,
        documents=LocalDocumentProvider(),
    )
    session.commit()  # sent to the provider, its answer lost: refund_pending

    period_end_sweep(session_factory, doors, now=NOW)
    session.expire_all()
    settled = session.scalar(select(CancellationSettlement))
    assert settled.amount_in_cents == 1500  # what is left once 35000 is back: 36500 - 35000
    task = session.scalar(select(Task).where(Task.kind == "manual_refund"))
    owed_by_hand = task.data["amountInCents"] if task is not None else 0
    provider, documents = card_server.provider(), doors.documents
    execute_refund(session, provider, TEST_CIPHER, staff_refund.id, now=NOW, documents=documents)
    session.commit()
    given_back = sum(r.amount_in_cents for r in card_server.simulator.refunds()) + owed_by_hand
    assert given_back <= charge.amount_in_cents
