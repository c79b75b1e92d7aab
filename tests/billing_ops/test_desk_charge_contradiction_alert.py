"""A desk charge the provider approved elsewhere (another terminal here) is held as a billing
contradiction: money taken, nothing completed. Collector attempts and pages raise the
`billing_contradiction` alert; a desk charge raised none, and the recovery sweep only counted it
as pending. It is now alerted once, when first recorded, whichever door finds it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.billing import recovery
from gymctl.models import PaymentTransaction
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import LATER, reconcile_desk, replay_desk

pytestmark = pytest.mark.embedded


@pytest.fixture
def alerts(caplog):
    """The messages of the billing alerts raised so far in the test."""
    caplog.set_level("WARNING", logger="gymctl.billing.alerts")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "gymctl.billing.alerts"]


def test_an_operators_reconcile_alerts_a_desk_contradiction_once(
    client, gym, charged_elsewhere, alerts
):
    body, transaction_id, owner = charged_elsewhere
    reconcile_desk(client, gym, body, transaction_id, owner)
    reconcile_desk(client, gym, body, transaction_id, owner)  # the same contradiction, seen again
    replay_desk(client, gym, body, transaction_id, owner)

    [alert] = alerts()
    assert "billing_contradiction" in alert
    assert transaction_id in alert


def test_a_replay_of_the_key_alerts_a_desk_contradiction(client, gym, charged_elsewhere, alerts):
    body, transaction_id, owner = charged_elsewhere
    replay_desk(client, gym, body, transaction_id, owner)

    [alert] = alerts()
    assert "billing_contradiction" in alert
    assert transaction_id in alert


def test_the_recovery_sweep_alerts_a_desk_contradiction_once(
    session_factory, card_server, documents, charged_elsewhere, alerts
):
    _, transaction_id, _ = charged_elsewhere
    for at in (LATER, LATER + timedelta(minutes=5)):
        summary = recovery.recovery_pass(
            session_factory, card_server.provider(), TEST_CIPHER, now=at, documents=documents
        )
        assert summary["deskCharges"]["pending"] == 1

    [alert] = alerts()
    assert "billing_contradiction" in alert
    assert transaction_id in alert


def test_a_contradiction_recorded_before_s49_as_its_timestamp_is_read_not_a_500(
    client, session, gym, charged_elsewhere, alerts
):
    """A desk charge stored its contradiction as the instant alone before s49 (no migration
    rewrites those rows): reconcile read it as a dict and answered 500, and the recovery pass
    stopped at it every five minutes. It is kept as the field now found, from that instant,
    and alerted once: none was raised when it was recorded."""
    body, transaction_id, owner = charged_elsewhere
    row = session.get(PaymentTransaction, uuid.UUID(transaction_id))
    earlier = (LATER - timedelta(days=1)).isoformat()
    row.billing_attempt = {**row.billing_attempt, "contradiction": earlier}
    session.commit()

    reconcile_desk(client, gym, body, transaction_id, owner)
    reconcile_desk(client, gym, body, transaction_id, owner)

    session.expire_all()
    row = session.get(PaymentTransaction, uuid.UUID(transaction_id))
    assert row.billing_attempt["contradiction"] == {"field": "terminal", "at": earlier}
    [alert] = alerts()
    assert transaction_id in alert
