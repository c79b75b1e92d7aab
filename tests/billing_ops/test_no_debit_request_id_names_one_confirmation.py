"""A confirm-no-debit request id names one confirmation (spec B 4.2: the body carries "a UUIDv4
request id"; docs/decisions.md: "The same requestId replays (replayed true); the same requestId
with other evidence is 409 billing_request_id_reused"), also when two requests carrying it
arrive at the same moment: on two different attempts one closes its attempt and the other is
refused with its attempt left pending; on one attempt (a double click) one closes it and the
other answers the replay. Real commits on both engines, two sessions at once, both past the
first look at the request id before either writes (they meet at the provider lookup)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

from sqlalchemy.orm import sessionmaker

from gymctl.billing import no_debit
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import TransactionStatus
from tests import factories
from tests.billing import factories as bf
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import (
    audit_rows,
    card_subscription,
    confirmation_of,
    pending_attempt,
)
from tests.conftest import NOW


class MeetAtLookup:
    """The card provider, where every caller of lookup_charge waits for the others: each
    request has passed its first look at the request id before any of them writes."""

    def __init__(self, provider, parties: int) -> None:
        self._provider = provider
        self._meet = threading.Barrier(parties, timeout=20)

    def __getattr__(self, name):
        return getattr(self._provider, name)

    def lookup_charge(self, terminal, unique_id):
        self._meet.wait()
        return self._provider.lookup_charge(terminal, unique_id)


def _two_attempts(url, card_server):
    factory = sessionmaker(bind=get_engine(url), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))
        other = factories.membership(
            session, user=factories.user(session), organization=gym.organization
        )
        found = [
            pending_attempt(
                session,
                card_subscription(session, gym, card_server, **membership),
                now=NOW - timedelta(minutes=5),
            )
            for membership in ({}, {"membership": other})
        ]
        session.commit()
    return factory, gym, found


def _at_once(factory, gym, provider, transactions, request_id) -> list[str]:
    """Each transaction's confirm-no-debit in its own thread and session, committed."""
    answers: list[str] = []

    def confirm(transaction) -> None:
        with factory() as session:
            try:
                answer = no_debit.confirm_no_debit(
                    session,
                    provider,
                    TEST_CIPHER,
                    organization_id=gym.organization.id,
                    transaction_id=transaction.id,
                    actor_user_id=gym.owner.id,
                    confirmation=confirmation_of(transaction, request_id=request_id),
                    now=NOW,
                )
                session.commit()
                answers.append(f"{answer['outcome']}:{answer['replayed']}")
            except DomainError as error:
                answers.append(error.code)

    threads = [threading.Thread(target=confirm, args=(t,)) for t in transactions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_one_request_id_on_two_attempts_at_once_closes_only_one(committed_database, card_server):
    factory, gym, (first, second) = _two_attempts(committed_database, card_server)
    provider = MeetAtLookup(card_server.provider(timeout=5.0), parties=2)

    answers = _at_once(factory, gym, provider, [first, second], uuid.uuid4())

    assert sorted(answers) == ["billing_request_id_reused", "not_charged:False"]
    with factory() as session:
        rows = [session.get(PaymentTransaction, t.id) for t in (first, second)]
        assert sorted(row.status.value for row in rows) == ["cancelled", "pending"]
        kept = next(row for row in rows if row.status == TransactionStatus.pending)
        assert kept.billing_resolution is None
        assert not session.get(Subscription, kept.subscription_id).collection_paused
        assert len(audit_rows(session, "billing.no_debit_confirmed")) == 1


def test_one_request_sent_twice_at_once_closes_the_attempt_once_and_replays(
    committed_database, card_server
):
    factory, gym, (first, _) = _two_attempts(committed_database, card_server)
    provider = MeetAtLookup(card_server.provider(timeout=5.0), parties=2)

    answers = _at_once(factory, gym, provider, [first, first], uuid.uuid4())

    assert sorted(answers) == ["not_charged:False", "not_charged:True"]
    with factory() as session:
        assert session.get(PaymentTransaction, first.id).status == TransactionStatus.cancelled
        assert len(audit_rows(session, "billing.no_debit_confirmed")) == 1
