"""A desk charge the provider approved elsewhere (another terminal here) is held as a billing
contradiction: money taken, nothing completed. Collector attempts and pages raise the
`billing_contradiction` alert; a desk charge raised none, and the recovery sweep only counted it
as pending. It is now alerted once, when first recorded, whichever door finds it."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from gymctl.billing import recovery
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import LATER
from tests.billing_ops.test_desk_charge_on_another_terminal import (
    _reconcile,
    _replay_the_key,
)
from tests.billing_ops.test_desk_charge_on_another_terminal import (
    charged_elsewhere as elsewhere,
)

pytestmark = pytest.mark.embedded


class _Alerts(logging.Handler):
    """Not caplog: the suite may run with -p no:logging."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def charged(client, clock, idp, session, gym, card_server):
    """A desk charge the provider holds on terminal 1000, its attempt naming 2000 (the other
    test file's case), at LATER."""
    return elsewhere.__wrapped__(client, clock, idp, session, gym, card_server)


@pytest.fixture
def alerts():
    handler = _Alerts()
    logger = logging.getLogger("gymctl.billing.alerts")
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


def test_an_operators_reconcile_alerts_a_desk_contradiction_once(client, gym, charged, alerts):
    body, transaction_id, owner = charged
    _reconcile(client, gym, body, transaction_id, owner)
    _reconcile(client, gym, body, transaction_id, owner)  # the same contradiction, seen again
    _replay_the_key(client, gym, body, transaction_id, owner)

    [alert] = alerts
    assert "billing_contradiction" in alert
    assert transaction_id in alert


def test_a_replay_of_the_key_alerts_a_desk_contradiction(client, gym, charged, alerts):
    body, transaction_id, owner = charged
    _replay_the_key(client, gym, body, transaction_id, owner)

    [alert] = alerts
    assert "billing_contradiction" in alert
    assert transaction_id in alert


def test_the_recovery_sweep_alerts_a_desk_contradiction_once(
    session_factory, card_server, documents, charged, alerts
):
    _, transaction_id, _ = charged
    for at in (LATER, LATER + timedelta(minutes=5)):
        summary = recovery.recovery_pass(
            session_factory, card_server.provider(), TEST_CIPHER, now=at, documents=documents
        )
        assert summary["deskCharges"]["pending"] == 1

    [alert] = alerts
    assert "billing_contradiction" in alert
    assert transaction_id in alert
