"""The recovery pass reports a desk charge's alerts with the collector's (s59 noticed it, left
it): `recovery_pass` is what the daemon logs and `gymctl billing sweep recovery` prints, and a
desk charge whose merchant account is gone, or that the provider took elsewhere (a billing
contradiction), was paged (a log line) but absent from the pass's `alerts`, which listed only
the collector's. Told once there too, as the page is."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing.recovery import recovery_pass
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing.test_s59_desk_charge_unanswered_alert import _lost_charge, disconnect
from tests.billing.test_s59_desk_charge_unanswered_alert import passes as sweeps
from tests.billing_ops.contradictions import LATER

pytestmark = pytest.mark.embedded


def test_a_desk_charge_told_by_the_recovery_pass_is_in_its_alerts_once(
    session,
    session_factory,
    gym,
    card_server,
):
    documents = LocalDocumentProvider()
    transaction_id = _lost_charge(session, session_factory, gym, card_server, documents)
    disconnect(session, gym)

    passes = sweeps(session_factory, card_server, documents, 5, 10, 15, sweep=recovery_pass)

    assert [summary["alerts"] for summary in passes] == [
        [
            {
                "reason": "original_account_unavailable",
                "transactionId": str(transaction_id),
                "organizationId": str(gym.organization.id),
            }
        ],
        [],
        [],
    ]
    assert [summary["deskCharges"]["errors"] for summary in passes] == [1, 1, 1]


def test_a_desk_contradiction_the_recovery_pass_finds_is_in_its_alerts_once(
    session_factory, card_server, documents, charged_elsewhere
):
    """Raised deep in the reconcile (`desk.apply_result`), not by the pass itself."""
    _, transaction_id, _ = charged_elsewhere
    told = [
        recovery_pass(
            session_factory, card_server.provider(), TEST_CIPHER, now=at, documents=documents
        )["alerts"]
        for at in (LATER, LATER + timedelta(minutes=5))
    ]

    assert told == [[{"reason": "billing_contradiction", "transactionId": transaction_id}], []]
