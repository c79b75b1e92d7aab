"""A refund is stored before the provider is asked, exactly like a charge (notes/billing.md:
"inserts the payment transaction row as UNKNOWN before calling the gateway"), so a crash
between any two steps, followed by a retry with another amount, never gives money back twice."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gymctl.billing.refunds import execute_refund, resume_refunds
from gymctl.errors import DomainError
from gymctl.models import PaymentProviderConfig, PaymentTransaction
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card_http import REFUND, refund_result
from tests.billing import factories as bf
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import committed_sale, paid_charge, store_refund
from tests.conftest import NOW

LATER = NOW + timedelta(minutes=5)
REPO = Path(__file__).resolve().parents[2]


def _begin(session, documents, sale, amount):
    return store_refund(session, sale, amount, documents)


def _fresh(session_factory, row_id):
    with session_factory() as other:
        return other.get(PaymentTransaction, row_id)


@pytest.mark.embedded
def test_the_refund_attempt_is_committed_refund_pending_before_any_provider_call(
    session, session_factory, gym, card_server, documents
):
    """Spec B 3: completed -> refund_pending -> refunded; the pending state is stored, with the
    unique id the provider will see, before the provider is called."""
    sale = paid_charge(session, gym, card_server, amount=9900)
    refund = _begin(session, documents, sale, 9900)

    stored = _fresh(session_factory, refund.id)
    assert stored.status == TransactionStatus.refund_pending
    assert stored.billing_attempt["amountInCents"] == 9900
    assert stored.billing_attempt["externalAttemptId"]
    assert _fresh(session_factory, sale.id).status == TransactionStatus.refund_pending
    assert card_server.requests(REFUND) == 0


def _crash_before_sending(session, provider, refund):
    """The process dies right after committing step 1."""


def _crash_after_the_provider_refunded(session, provider, refund):
    """The provider refunds, its answer is lost on the way back."""
    provider_server, documents = provider
    provider_server.inject(REFUND, Fault.answer_lost)
    left = execute_refund(
        session, provider_server.provider(), TEST_CIPHER, refund.id, now=NOW, documents=documents
    )
    assert left.status == TransactionStatus.refund_pending
    session.commit()


def _crash_before_committing_the_answer(session, provider, refund):
    """The answer arrives and is applied, and the process dies before its commit."""
    provider_server, documents = provider
    done = execute_refund(
        session, provider_server.provider(), TEST_CIPHER, refund.id, now=NOW, documents=documents
    )
    assert done.status == TransactionStatus.refunded
    session.rollback()


def test_one_refund_that_raises_holds_back_no_other_gyms_refund(
    session, session_factory, card_server, documents
):
    """s54 (a hunt): the recovery pass resends every gym's stored refunds, oldest first; one
    that raised (its account's credentials unreadable) stopped it there, the other gyms'
    refunds and the desk charges' recovery after them with it. It is counted and left pending."""
    broken = bf.make_gym(session, card_provider_since=NOW - timedelta(days=400))
    healthy = bf.make_gym(session, card_provider_since=NOW - timedelta(days=400))
    first = store_refund(session, paid_charge(session, broken, card_server), 9900, documents,
                         now=NOW - timedelta(minutes=10))  # fmt: skip
    second = store_refund(session, paid_charge(session, healthy, card_server), 9900, documents,
                          now=NOW - timedelta(minutes=9))  # fmt: skip
    for config in session.scalars(
        select(PaymentProviderConfig).where(
            PaymentProviderConfig.organization_id == broken.organization.id
        )
    ):
        config.credentials_ciphertext = "v1:damaged"
    session.commit()

    counts = resume_refunds(
        session_factory, card_server.provider(), TEST_CIPHER, now=NOW, documents=documents
    )

    assert counts == {"selected": 2, "refunded": 1, "failed": 0, "pending": 0, "errors": 1}
    assert _fresh(session_factory, first.id).status == TransactionStatus.refund_pending
    assert _fresh(session_factory, second.id).status == TransactionStatus.refunded


@pytest.mark.embedded
@pytest.mark.parametrize(
    "crash",
    [
        _crash_before_sending,
        _crash_after_the_provider_refunded,
        _crash_before_committing_the_answer,
    ],
)
def test_a_crash_between_any_two_steps_then_a_retry_with_another_amount_refunds_once(
    session, session_factory, gym, card_server, documents, crash
):
    sale = paid_charge(session, gym, card_server, amount=9900)
    refund = _begin(session, documents, sale, 6000)
    crash(session, (card_server, documents), refund)

    with pytest.raises(DomainError) as refused:  # the operator tries again, another amount
        _begin(session, documents, sale, 9900)
    assert (refused.value.code, refused.value.status) == ("refund_in_progress", 409)
    assert refused.value.details["refundTransactionId"] == str(refund.id)

    counts = resume_refunds(
        session_factory, card_server.provider(), TEST_CIPHER, now=LATER, documents=documents
    )
    assert counts == {"selected": 1, "refunded": 1, "failed": 0, "pending": 0, "errors": 0}
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [6000]
    ids_sent = {body["ExternalUniqTranId"] for body in card_server.received(REFUND)}
    assert ids_sent == {refund.billing_attempt["externalAttemptId"]}
    assert _fresh(session_factory, refund.id).status == TransactionStatus.refunded
    sale = _fresh(session_factory, sale.id)
    assert (sale.status, sale.metadata_["refundedInCents"]) == (TransactionStatus.completed, 6000)

    again = resume_refunds(
        session_factory, card_server.provider(), TEST_CIPHER, now=LATER, documents=documents
    )
    assert again["selected"] == 0  # a second recovery finds nothing to send
    with pytest.raises(DomainError) as too_much:
        _begin(session, documents, sale, 9900)
    assert too_much.value.code == "refund_exceeds_remaining"


@pytest.mark.embedded
def test_recovery_leaves_a_refund_inside_the_executing_grace_alone(
    session, session_factory, gym, card_server, documents
):
    """Spec B 8: a 90 second executing grace; the door that stored it may still be sending."""
    sale = paid_charge(session, gym, card_server)
    _begin(session, documents, sale, 100)
    counts = resume_refunds(
        session_factory,
        card_server.provider(),
        TEST_CIPHER,
        now=NOW + timedelta(seconds=30),
        documents=documents,
    )
    assert counts["selected"] == 0
    assert card_server.requests(REFUND) == 0


class ReusedIdWhileOnItsWay:
    """The provider's answer to a refund sent again while the first request is still on its way:
    608, the unique id used before (the real provider's code; the simulator answers the first
    request's outcome instead, atomically), read through the client's own mapping."""

    def __init__(self, provider):
        self.provider = provider

    def refund(self, terminal, **refund):
        return refund_result({"ResponseCode": 608, "Description": "ExternalUniqTranId used"})

    def __getattr__(self, name):
        return getattr(self.provider, name)


@pytest.mark.embedded
def test_a_refund_answered_608_stays_pending_and_is_sent_again_under_its_id(
    session, session_factory, gym, card_server, documents
):
    """608 says the id was used before, not how that refund ended: read as a refusal, the
    refund was marked failed and the payment completed again while the first request
    refunded the member (staff would then refund a second time)."""
    sale = paid_charge(session, gym, card_server, amount=9900)
    refund = _begin(session, documents, sale, 9900)
    counts = resume_refunds(
        session_factory,
        ReusedIdWhileOnItsWay(card_server.provider()),
        TEST_CIPHER,
        now=LATER,
        documents=documents,
    )
    assert counts == {"selected": 1, "refunded": 0, "failed": 0, "pending": 1, "errors": 0}
    assert _fresh(session_factory, refund.id).status == TransactionStatus.refund_pending
    assert _fresh(session_factory, sale.id).status == TransactionStatus.refund_pending
    # Marked asked: a pass takes the refunds asked longest ago first (attempts.ASKING_ORDER).
    assert _fresh(session_factory, refund.id).asked_at == LATER

    counts = resume_refunds(
        session_factory, card_server.provider(), TEST_CIPHER, now=LATER, documents=documents
    )
    assert counts["refunded"] == 1
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [9900]


REFUNDER = """
import sys, time, uuid
from datetime import datetime
from gymctl.billing.refunds import begin_refund, execute_refund
from gymctl.db import get_engine, session_factory
from gymctl.models import PaymentTransaction
from gymctl.providers.card_http import HttpCardProvider
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
url, card_url, sale_id, pause = sys.argv[1], sys.argv[2], uuid.UUID(sys.argv[3]), sys.argv[4]
now = datetime.fromisoformat(sys.argv[5])
documents = LocalDocumentProvider()
with session_factory(get_engine(url))() as session:
    sale = session.get(PaymentTransaction, sale_id)
    refund = begin_refund(session, transaction=sale, amount_cents=6000, reason="moved",
                          actor_user_id=None, now=now, documents=documents)
    session.commit()
    print("stored", flush=True)
    if pause == "before_sending":
        time.sleep(60)
    execute_refund(session, HttpCardProvider(card_url, timeout=30), TEST_CIPHER, refund.id,
                   now=now, documents=documents)
    session.commit()
"""


@pytest.mark.parametrize("pause", ["before_sending", "while_the_provider_refunds"])
def test_a_refunding_process_killed_between_steps_never_refunds_twice(
    committed_pg, card_server, documents, pause
):
    """A real process, killed with SIGKILL after storing the refund (before sending it, or
    while the provider is refunding): a retry with another amount is refused, and recovery
    sends the stored refund once."""
    factory, sale = committed_sale(committed_pg, card_server)
    if pause != "before_sending":
        card_server.inject(REFUND, Fault.delay, seconds=1.0)  # it refunds after the kill
    arguments = [committed_pg, card_server.url, str(sale.id), pause, NOW.isoformat()]
    process = subprocess.Popen(
        [sys.executable, "-c", REFUNDER, *arguments],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert process.stdout.readline().strip() == "stored"
        if pause != "before_sending":
            _until(lambda: card_server.requests(REFUND) == 1)
    finally:
        process.kill()
        process.wait()
    if pause != "before_sending":
        _until(lambda: len(card_server.simulator.refunds()) == 1)  # the provider finished

    with factory() as session, pytest.raises(DomainError) as refused:
        _begin(session, documents, session.get(PaymentTransaction, sale.id), 3900)
    assert refused.value.code == "refund_in_progress"
    counts = resume_refunds(
        factory, card_server.provider(), TEST_CIPHER, now=LATER, documents=documents
    )
    assert counts["refunded"] == 1
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [6000]
    with factory() as session:
        assert session.get(PaymentTransaction, sale.id).metadata_["refundedInCents"] == 6000


def _until(condition, tries: int = 400) -> None:
    """Wait for another process or thread to get there (a bound on waiting, not a timing
    assert)."""
    for _ in range(tries):
        if condition():
            return
        time.sleep(0.025)
    raise AssertionError("the condition was never reached")
