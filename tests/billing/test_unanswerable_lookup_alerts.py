"""A renewal the provider charged, its answer lost with the process; the provider then refuses
every lookup of it (a ResponseCode on the lookup: the merchant account's API access revoked, say).
Recovery keeps it pending, which is right, but it must not stay stuck for ever unseen: spec B 6
names the collector's alerts, and a pending attempt means "the card may have been charged"."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import attempts, collector
from gymctl.models import Subscription
from gymctl.models.billing import SubscriptionStatus, TransactionStatus
from gymctl.providers.card_http import ProviderRefused
from tests.billing import factories as bf
from tests.billing.cards import Sandbox
from tests.billing.crashed_renewals import due_subscription, fresh, rows
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


class RefusesLookups:
    def __init__(self, inner) -> None:
        self.inner = inner

    def lookup_charge(self, terminal, unique_id):
        raise ProviderRefused("Transactions/GetTransactionByExternalId", 9002, "refused")

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


def test_an_attempt_whose_lookups_are_refused_for_a_day_raises_an_alert(
    session, session_factory, sandbox
):
    gym = bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))
    subscription = due_subscription(session, gym, sandbox)
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        worker.commit()
        assert attempts.send_attempt(began, sandbox.provider).outcome == "approved"
        worker.rollback()  # ...the process dies before applying the answer
    provider = RefusesLookups(sandbox.provider)
    alerts = []
    at = NOW
    for _ in range(3 * 12):  # three hours of recovery passes, every 5 minutes
        at += timedelta(minutes=5)
        alerts += collector.recover(session_factory, provider, now=at, cipher=TEST_CIPHER).alerts
        alerts += collector.catch_up(session_factory, provider, now=at, cipher=TEST_CIPHER).alerts

    (attempt,) = rows(session_factory, subscription.id)
    assert attempt.status == TransactionStatus.pending  # kept pending: right
    after = fresh(session_factory, Subscription, subscription.id)
    assert after.status == SubscriptionStatus.active
    assert after.current_period_end < at
    # ...but hours later someone must have been told about the charge left unresolved.
    told = [a for a in alerts if a.get("transactionId") == str(attempt.id)]
    assert [a["reason"] for a in told] == ["attempt_unanswered"], alerts  # once, not each pass
