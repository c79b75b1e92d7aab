"""A credit note's idempotency key names one request (spec B 4.3: "a replay answers replayed
true and files nothing"; docs/decisions.md: the same key for another request is 409
idempotency_key_reused), also when two requests carrying it arrive at once on two different
sales: each holds only its own sale's lock, so the loser meets the winner's row on the unique
key, and must refuse it, not answer the other sale's credit note as its own replay. PostgreSQL
with real commits, two sessions at once (the embedded default runs one writer at a time: the
loser's first look already finds the row)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.billing import credit_notes
from gymctl.billing.credit_notes import CreditNoteRequest, file_credit_note
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionType
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing import factories as bf
from tests.billing_ops.helpers import paid_charge
from tests.conftest import NOW


@pytest.fixture
def two_sales(committed_pg, card_server):
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))
        sales = [paid_charge(session, gym, card_server, amount=amount) for amount in (9900, 5000)]
        session.commit()
    return factory, gym, sales


def _meet_after_the_key_lookup(monkeypatch, parties: int) -> None:
    """Both requests have looked their key up (and found nothing) before either files."""
    meet, met = threading.Barrier(parties, timeout=20), set()
    real = credit_notes.refundable_amount

    def cap_of(sale):
        if threading.get_ident() not in met:
            met.add(threading.get_ident())
            meet.wait()
        return real(sale)

    monkeypatch.setattr(credit_notes, "refundable_amount", cap_of)


def test_one_key_on_two_sales_at_once_files_one_credit_note_and_refuses_the_other(
    two_sales, monkeypatch
):
    factory, gym, sales = two_sales
    key = uuid.uuid4()
    _meet_after_the_key_lookup(monkeypatch, parties=2)
    answers: dict[uuid.UUID, str] = {}

    def file(sale) -> None:
        with factory() as session:
            try:
                answer = file_credit_note(
                    session,
                    organization_id=gym.organization.id,
                    sale_id=sale.id,
                    request=CreditNoteRequest(key, 1000, True, "towel"),
                    actor_user_id=gym.owner.id,
                    now=NOW,
                    documents=LocalDocumentProvider(),
                )
                session.commit()
                answers[sale.id] = f"replayed:{answer['replayed']}"
            except DomainError as error:
                answers[sale.id] = error.code

    threads = [threading.Thread(target=file, args=(sale,)) for sale in sales]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(answers.values()) == ["idempotency_key_reused", "replayed:False"]
    with factory() as session:
        notes = list(
            session.scalars(
                select(PaymentTransaction).where(PaymentTransaction.type == TransactionType.refund)
            )
        )
        assert len(notes) == 1
        filed_on = notes[0].metadata_["refundedTransactionId"]
        winner = next(sale_id for sale_id, said in answers.items() if said == "replayed:False")
        assert filed_on == str(winner)
        loser = next(sale for sale in sales if sale.id != winner)
        assert "creditedInCents" not in session.get(PaymentTransaction, loser.id).metadata_
