"""Every card payment the provider took carries its document (s60): a hosted page's charge, a
renewal and a debt retry the collector settles get a TaxInvoiceAndReceipt as a desk sale does,
numbered in the organization's one gapless sequence, and a refund of one reverses it with a
TaxInvoiceAndReceiptRefund. Before, only desk, debt, plan, refund and credit-note payments had
one: a gym's renewals, most of its money, had no receipt."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from gymctl.db import get_engine
from gymctl.models import DocumentCounter, PaymentTransaction, Role, Subscription
from gymctl.models.billing import SubscriptionStatus, TransactionStatus, TransactionType
from tests.billing.cards import APPROVE, DECLINE, connect_card_provider
from tests.billing.passes import collect
from tests.billing.test_checkout_webhooks import app, create_plan, purchase, webhook  # noqa: F401
from tests.billing_ops.contradictions import org_url, page_contradiction
from tests.billing_ops.helpers import card_of, card_subscription
from tests.bookings.conftest import add_member
from tests.conftest import NOW
from tests.factories import Gym, make_gym
from tests.lock_order import run_together

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


def _payments(session, subscription_id) -> list[PaymentTransaction]:
    session.expire_all()
    return list(
        session.scalars(
            select(PaymentTransaction)
            .where(
                PaymentTransaction.subscription_id == subscription_id,
                PaymentTransaction.type != TransactionType.refund,
            )
            .order_by(PaymentTransaction.created_at)
        )
    )


def test_a_page_charge_and_its_renewal_get_receipts_and_a_refund_reverses_one_over_http(
    client, org, card_server, session, session_factory
):
    plan = create_plan(client, org)
    bought = purchase(client, org, plan)
    assert bought.status_code == 201, bought.json
    card_server.complete_page(bought.json["data"]["checkout"]["pageId"], APPROVE)
    assert webhook(client, org, bought.json["data"]["checkout"]["pageId"]).status_code == 200
    subscription_id = uuid.UUID(bought.json["data"]["subscription"]["id"])
    [page_charge] = _payments(session, subscription_id)
    assert (page_charge.document_type, page_charge.document_number) == ("TaxInvoiceAndReceipt", "1")

    subscription = session.get(Subscription, subscription_id)
    at = subscription.next_charge_date + timedelta(minutes=1)
    assert collect(session_factory, subscription, card_server.provider(), at) == "charged"
    page_charge, renewal = _payments(session, subscription_id)
    assert renewal.status == TransactionStatus.completed
    assert (renewal.document_type, renewal.document_number) == ("TaxInvoiceAndReceipt", "2")
    assert page_charge.document_number == "1"  # issued once: a later settle numbers no other

    refunded = client.post(
        f"/organizations/{org.id}/payments/transactions/{renewal.id}/refund",
        json={"amountInCents": 5000, "reason": "charged while away"},
        headers=org[Role.owner].headers,
    )
    assert refunded.status_code == 201, refunded.json
    refund = refunded.json["data"]
    # The renewal had a tax invoice, so its refund document reverses one.
    assert (refund["documentType"], refund["documentNumber"]) == ("TaxInvoiceAndReceiptRefund", "3")


def test_a_declined_renewal_gets_no_document_and_the_paid_retry_takes_the_next_number(
    session, session_factory, gym, card_server
):
    """Only money taken is documented: a decline numbers nothing (the sequence stays
    gapless), and the debt's retry that is paid gets the next number."""
    subscription = card_subscription(session, gym, card_server, number=DECLINE)
    session.commit()
    assert collect(session_factory, subscription, card_server.provider(), NOW) == "declined"
    [declined] = _payments(session, subscription.id)
    assert (declined.document_type, declined.document_number) == (None, None)
    assert session.scalar(select(func.count()).select_from(DocumentCounter)) == 0

    session.refresh(subscription)
    subscription.payment_method_id = card_of(session, gym, card_server, APPROVE).id  # a new card
    session.commit()
    retry_at = session.get(Subscription, subscription.id).retry_at
    assert collect(session_factory, subscription, card_server.provider(), retry_at) == "charged"
    _, paid = _payments(session, subscription.id)
    assert paid.status == TransactionStatus.completed
    assert session.get(Subscription, subscription.id).status == SubscriptionStatus.active
    assert (paid.document_type, paid.document_number) == ("TaxInvoiceAndReceipt", "1")


def test_two_renewals_of_one_gym_settled_at_once_take_two_numbers_on_postgresql(
    committed_pg, card_server
):
    """Two collector processes settle two members' renewals of one gym at the same moment,
    each paused just before numbering its document: the counter row serializes them, both
    commit, and the numbers are 1 and 2 (no gap, no number twice)."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        renewing = [
            card_subscription(session, Gym.of(add_member(session, gym.organization)), card_server)
            for _ in range(2)
        ]
        session.commit()

    def renewal(subscription):
        def charge() -> None:
            outcome = collect(factory, subscription, card_server.provider(timeout=5.0), NOW)
            assert outcome == "charged", outcome

        return charge

    def numbering(statement: str, _parameters) -> bool:
        return statement.startswith("INSERT INTO document_counters")

    errors = run_together(
        engine, {f"collector-{n}": (numbering, renewal(s)) for n, s in enumerate(renewing)}
    )

    assert errors == []
    with factory() as session:
        numbers = [_payments(session, s.id)[0].document_number for s in renewing]
    assert sorted(numbers) == ["1", "2"]


@pytest.mark.parametrize(
    ("decision", "refund_document"),
    [("accept", None), ("refund", ("TaxInvoiceAndReceiptRefund", "2"))],
)
def test_a_page_contradiction_settled_either_way_documents_the_money_taken(
    client, org, card_server, session, decision, refund_document
):
    """A page the provider took at another amount, settled by the operator's door: the money
    taken (250.00) gets its TaxInvoiceAndReceipt whatever the decision, and a refund of it all
    reverses that document (a desk charge's contradiction did so already; a page's was a
    ReceiptRefund of a payment that had none)."""
    _, transaction_id = page_contradiction(client, org, card_server, session)
    settled = client.post(
        f"{org_url(org, transaction_id)}/settle-contradiction",
        json={"decision": decision, "amountInCents": 25000, "currency": "ILS"},
        headers=org[Role.owner].headers,
    )
    assert settled.status_code == 200, settled.json

    session.expire_all()
    taken = session.get(PaymentTransaction, transaction_id)
    assert (taken.document_type, taken.document_number) == ("TaxInvoiceAndReceipt", "1")
    refunds = session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.type == TransactionType.refund)
    ).all()
    assert [(r.document_type, r.document_number) for r in refunds] == (
        [refund_document] if refund_document else []
    )
