"""Credit notes on a sale (spec B 4.3): capped at what remains creditable, idempotent on their
key (a replay answers replayed true and files nothing), with a cash-returned flag."""

from __future__ import annotations

import uuid

import pytest

from gymctl.billing.credit_notes import CreditNoteRequest, file_credit_note
from gymctl.errors import DomainError
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.providers.card_http import REFUND
from tests.billing_ops.helpers import audit_rows, paid_charge, refund_rows
from tests.conftest import NOW


def _file(session, gym, documents, sale, key=None, amount=3000, cash=True):
    return file_credit_note(
        session,
        organization_id=gym.organization.id,
        sale_id=sale.id,
        request=CreditNoteRequest(key or uuid.uuid4(), amount, cash, "damaged towel"),
        actor_user_id=gym.owner.id,
        now=NOW,
        documents=documents,
    )


@pytest.mark.embedded
def test_a_credit_note_files_a_refund_document_and_a_replay_files_nothing(
    session, gym, card_server, documents
):
    sale = paid_charge(session, gym, card_server, amount=10000)
    key = uuid.uuid4()

    first = _file(session, gym, documents, sale, key)
    replay = _file(session, gym, documents, sale, key)

    assert first["replayed"] is False
    assert first["creditNote"]["documentType"] == "TaxInvoiceAndReceiptRefund"
    assert first["creditNote"]["cashReturned"] is True
    assert first["remainingInCents"] == 7000
    assert replay["replayed"] is True
    assert replay["creditNote"] == first["creditNote"]
    assert refund_rows(session) == 1
    assert len(audit_rows(session, "payment.credit_note_filed")) == 1
    assert card_server.requests(REFUND) == 0


def test_above_what_remains_creditable_is_refused(session, gym, card_server, documents):
    sale = paid_charge(session, gym, card_server, amount=10000)
    _file(session, gym, documents, sale, amount=8000, cash=False)
    with pytest.raises(DomainError) as refused:
        _file(session, gym, documents, sale, amount=2001)
    assert (refused.value.code, refused.value.status) == ("credit_note_amount_exceeds_cap", 409)
    assert refused.value.details["remainingInCents"] == 2000
    assert refund_rows(session) == 1


def test_the_same_key_for_another_credit_note_is_refused(session, gym, card_server, documents):
    sale = paid_charge(session, gym, card_server, amount=10000)
    key = uuid.uuid4()
    _file(session, gym, documents, sale, key, amount=1000)
    with pytest.raises(DomainError) as refused:
        _file(session, gym, documents, sale, key, amount=1001)
    assert (refused.value.code, refused.value.status) == ("idempotency_key_reused", 409)
    assert refund_rows(session) == 1


def test_only_a_completed_sale_takes_a_credit_note(session, gym, card_server, documents):
    sale = paid_charge(session, gym, card_server, amount=10000)
    sale.status = TransactionStatus.pending
    with pytest.raises(DomainError) as pending:
        _file(session, gym, documents, sale)
    assert (pending.value.code, pending.value.status) == ("credit_note_not_creditable", 409)
    sale.status = TransactionStatus.completed
    with pytest.raises(DomainError) as zero:
        _file(session, gym, documents, sale, amount=0)
    assert (zero.value.code, zero.value.status) == ("amount_invalid", 422)
    with pytest.raises(DomainError) as bad_key:
        _file(session, gym, documents, sale, key=uuid.uuid1())
    assert (bad_key.value.code, bad_key.value.status) == ("idempotency_key_invalid", 422)
    assert refund_rows(session) == 0


@pytest.mark.embedded
def test_a_renewal_payment_takes_a_credit_note_and_a_refund_row_does_not(
    session, gym, card_server, documents
):
    """The collector writes renewals and opening-day charges as `recurring`: they are sales the
    member paid for as much as a desk sale (found by the member's-life suite: the gym could
    refund a renewal but not credit it)."""
    renewal = paid_charge(session, gym, card_server, amount=10000, type=TransactionType.recurring)

    filed = _file(session, gym, documents, renewal, amount=2500)

    assert (filed["replayed"], filed["remainingInCents"]) == (False, 7500)
    note = session.get(type(renewal), uuid.UUID(filed["creditNote"]["id"]))
    with pytest.raises(DomainError) as refused:
        _file(session, gym, documents, note, amount=100)
    assert (refused.value.code, refused.value.status) == ("credit_note_not_creditable", 409)
    assert refund_rows(session) == 1
