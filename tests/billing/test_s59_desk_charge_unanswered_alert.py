"""A desk charge the recovery sweep cannot resolve is told to an operator, once, as the
collector's recovery tells its attempts (collector.recover, attempts.resolve_attempt).

Spec B 2.2: "A pending billing attempt means the local outcome is unresolved, not that the card
was uncharged"; spec B 6 pages billing problems as alerts. The desk recovery
(desk_resolution.recover_desk_charges) swallowed the refusal of a charge it could not resolve
(the provider unreachable on its lookups, the merchant account that sent it gone) with no
alert: a member's card possibly charged, nobody ever told. Now, as the collector does, a charge
whose lookups went unanswered for attempts.UNANSWERED_ALERT_AFTER past its grace raises
attempt_unanswered, and one whose original account is gone original_account_unavailable: each
once, not at every five-minute pass."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from gymctl.billing import attempts
from gymctl.billing.desk import DeskChargeRequest
from gymctl.billing.desk_resolution import recover_desk_charges
from gymctl.errors import DomainError
from gymctl.models import PaymentProviderConfig, PaymentTransaction
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card_http import CHARGE, LOOKUP_CHARGE
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing import factories as bf
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import card_of, charge_at_desk
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


@pytest.fixture
def alerts(caplog):
    """The messages of the billing alerts raised so far in the test."""
    caplog.set_level("WARNING", logger="gymctl.billing.alerts")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "gymctl.billing.alerts"]


def _lost_charge(session, session_factory, gym, card_server, documents) -> uuid.UUID:
    """A desk charge the provider made whose answer was lost: pending."""
    card_of(session, gym, card_server)
    session.commit()
    card_server.inject(CHARGE, Fault.answer_lost)
    request = DeskChargeRequest(uuid.uuid4(), gym.member.id, 4500, "ILS", "protein bar")
    with pytest.raises(DomainError) as pending:
        charge_at_desk(session_factory, gym, card_server.provider(), documents, request)
    return uuid.UUID(pending.value.details["transactionId"])


def disconnect(session, gym) -> None:
    """The gym's merchant accounts disconnected: nothing left to ask a charge's lookups with."""
    for config in session.query(PaymentProviderConfig).filter_by(
        organization_id=gym.organization.id
    ):
        config.credentials_ciphertext = None
    session.commit()


def passes(
    session_factory, card_server, documents, *minutes: int, sweep=recover_desk_charges
) -> list[dict[str, Any]]:
    """Recovery passes (the desk charges', or `sweep`) at these minutes past NOW (the charge's
    start)."""
    return [
        sweep(
            session_factory,
            card_server.provider(),
            TEST_CIPHER,
            now=NOW + timedelta(minutes=at),
            documents=documents,
        )
        for at in minutes
    ]


def _told(alerts, reason: str, transaction_id: uuid.UUID) -> list[str]:
    return [a for a in alerts() if reason in a and str(transaction_id) in a]


def test_a_desk_charge_whose_lookups_go_unanswered_for_an_hour_is_told_once(
    session, session_factory, gym, card_server, alerts
):
    documents = LocalDocumentProvider()
    transaction_id = _lost_charge(session, session_factory, gym, card_server, documents)
    card_server.inject(LOOKUP_CHARGE, Fault.error, times=None)  # an outage of the lookups

    within = passes(session_factory, card_server, documents, 5, 30, 60)
    assert all(counts["errors"] == 1 for counts in within)
    assert _told(alerts, attempts.UNANSWERED, transaction_id) == []  # not within the hour

    passes(session_factory, card_server, documents, 65, 70, 75, 120, 180)  # hours of passes

    session.expire_all()
    row = session.get(PaymentTransaction, transaction_id)
    assert row.status == TransactionStatus.pending  # kept pending: the card may be charged
    assert len(_told(alerts, attempts.UNANSWERED, transaction_id)) == 1  # once, not each pass


def test_a_desk_charge_whose_merchant_account_is_gone_is_told_once(
    session, session_factory, gym, card_server, alerts
):
    documents = LocalDocumentProvider()
    transaction_id = _lost_charge(session, session_factory, gym, card_server, documents)
    disconnect(session, gym)

    counts = passes(session_factory, card_server, documents, 5, 10, 15, 90)

    assert all(c["errors"] == 1 for c in counts)
    assert card_server.requests(LOOKUP_CHARGE) == 0
    assert len(_told(alerts, "original_account_unavailable", transaction_id)) == 1
