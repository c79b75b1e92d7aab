"""Refunds (spec B 3: completed -> refund_pending -> refunded) through the fake card provider,
with refund documents numbered per organization by the local document provider."""

from __future__ import annotations

import uuid

import pytest

from gymctl import ids
from gymctl.billing import accounts
from gymctl.billing.refunds import begin_refund, execute_refund, raise_unless_refunded
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import REFUND
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import audit_rows, forget_account, paid_charge, refund_rows
from tests.conftest import NOW


def _begin(session, documents, transaction, amount, **kwargs):
    refund = begin_refund(
        session,
        transaction=transaction,
        amount_cents=amount,
        reason="member moved away",
        actor_user_id=kwargs.pop("actor", None),
        now=NOW,
        documents=documents,
        **kwargs,
    )
    session.commit()  # step 1 is stored before the provider is asked
    return refund


def _refund(session, provider, documents, transaction, amount, **kwargs):
    """The three steps as a door runs them: store and commit, send and apply, commit."""
    refund = _begin(session, documents, transaction, amount, **kwargs)
    refund = execute_refund(session, provider, TEST_CIPHER, refund.id, now=NOW, documents=documents)
    session.commit()
    raise_unless_refunded(refund)
    return refund


def test_a_full_card_refund_moves_money_back_once_with_a_receipt_refund(
    session, gym, card_server, provider, documents
):
    sale = paid_charge(session, gym, card_server, amount=9900)

    refund = _refund(session, provider, documents, sale, 9900, actor=gym.owner.id)

    assert refund.type == TransactionType.refund
    assert refund.status == TransactionStatus.refunded
    assert refund.metadata_["refundedTransactionId"] == str(sale.id)
    assert refund.refund_external_reference
    assert (refund.document_type, refund.document_number) == ("ReceiptRefund", "1")
    assert sale.status == TransactionStatus.refunded
    assert card_server.requests(REFUND) == 1
    [audit] = audit_rows(session, "payment.refunded")
    assert audit.actor_user_id == gym.owner.id
    assert audit.data["amountInCents"] == 9900


@pytest.mark.embedded
def test_a_partial_refund_keeps_the_sale_completed_and_a_tax_invoice_gets_its_refund_document(
    session, gym, card_server, provider, documents
):
    sale = paid_charge(
        session,
        gym,
        card_server,
        amount=10000,
        document_type="TaxInvoiceAndReceipt",
        document_number="7",
    )

    first = _refund(session, provider, documents, sale, 4000)
    second = _refund(session, provider, documents, sale, 6000)

    assert first.document_type == "TaxInvoiceAndReceiptRefund"
    assert [first.document_number, second.document_number] == ["1", "2"]
    assert sale.status == TransactionStatus.refunded
    assert sale.metadata_["refundedInCents"] == 10000


def test_documents_are_numbered_per_organization(session, gym, card_server, provider, documents):
    other = bf.make_gym(session)
    connect_card_provider(session, other)
    ours = _refund(session, provider, documents, paid_charge(session, gym, card_server), 100)
    theirs = _refund(session, provider, documents, paid_charge(session, other, card_server), 100)
    assert ours.document_number == theirs.document_number == "1"


def test_a_cash_payment_is_refunded_by_hand_without_the_provider(
    session, gym, card_server, provider, documents
):
    sale = paid_charge(session, gym, card_server, amount=5000)
    sale.provider, sale.method, sale.provider_transaction_id = "manual", "cash", None

    refund = _refund(session, provider, documents, sale, 5000, source="cash_notice_settlement")

    assert refund.status == TransactionStatus.refunded
    assert refund.metadata_["cashReturned"] is True
    assert refund.metadata_["source"] == "cash_notice_settlement"
    assert card_server.requests(REFUND) == 0


@pytest.mark.parametrize(
    ("amount", "code", "status"),
    [(0, "refund_amount_invalid", 422), (9901, "refund_exceeds_remaining", 409)],
)
def test_a_bad_amount_is_refused_and_nothing_changes(
    session, gym, card_server, provider, documents, amount, code, status
):
    sale = paid_charge(session, gym, card_server, amount=9900)
    with pytest.raises(DomainError) as refused:
        _refund(session, provider, documents, sale, amount)
    assert (refused.value.code, refused.value.status) == (code, status)
    assert sale.status == TransactionStatus.completed
    assert refund_rows(session) == 0
    assert card_server.requests(REFUND) == 0


def test_only_a_completed_payment_is_refundable(session, gym, card_server, provider, documents):
    sale = paid_charge(session, gym, card_server)
    sale.status = TransactionStatus.failed
    with pytest.raises(DomainError) as refused:
        _refund(session, provider, documents, sale, 100)
    assert (refused.value.code, refused.value.status) == ("refund_not_refundable", 409)
    assert refund_rows(session) == 0


def test_a_card_payment_without_its_provider_transaction_is_never_refunded_by_hand(
    session, gym, card_server, provider, documents
):
    """Card money goes back through the provider only: no provider reference, no refund row
    claiming the member was paid back."""
    sale = paid_charge(session, gym, card_server)
    sale.provider_transaction_id = None
    with pytest.raises(DomainError) as refused:
        _refund(session, provider, documents, sale, 100)
    assert (refused.value.code, refused.value.status) == ("refund_provider_reference_missing", 409)
    assert sale.status == TransactionStatus.completed
    assert refund_rows(session) == 0
    assert card_server.requests(REFUND) == 0


def test_a_refund_goes_to_the_terminal_that_took_the_payment(
    session, gym, card_server, provider, documents
):
    """The gym moved to a new terminal: the old one's kept credentials still refund its deal;
    without them the refund is refused and nothing changes."""
    sale = paid_charge(session, gym, card_server, billing_attempt={"terminal": "1000"})
    other = paid_charge(session, gym, card_server, billing_attempt={"terminal": "1000"})
    connect_card_provider(session, gym, terminal=Terminal("2000", "other"))
    assert accounts.active_config(session, gym.organization.id).terminal == "2000"

    refund = _refund(session, provider, documents, sale, 100)

    assert refund.status == TransactionStatus.refunded
    assert card_server.received(REFUND)[0]["TerminalNumber"] == 1000
    forget_account(session, gym, "1000")
    with pytest.raises(DomainError) as refused:
        _refund(session, provider, documents, other, 100)
    assert (refused.value.code, refused.value.status) == (
        "refund_original_account_unavailable",
        409,
    )
    assert other.status == TransactionStatus.completed


def test_a_provider_refusal_is_refund_declined_and_the_payment_is_refundable_again(
    session, gym, card_server, provider, documents
):
    sale = paid_charge(session, gym, card_server, amount=500)
    sale.provider_transaction_id = str(ids.new_id().int % 10**9)  # no such deal there
    with pytest.raises(DomainError) as refused:
        _refund(session, provider, documents, sale, 500)
    assert (refused.value.code, refused.value.status) == ("refund_declined", 409)
    refund = session.get(
        PaymentTransaction, uuid.UUID(refused.value.details["refundTransactionId"])
    )
    assert refund.status == TransactionStatus.failed
    session.refresh(sale)
    assert sale.status == TransactionStatus.completed
    assert card_server.simulator.refunds() == []
