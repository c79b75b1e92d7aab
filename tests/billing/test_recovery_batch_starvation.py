"""Recovery takes one batch of pending attempts a pass. Oldest `updated_at` first, an attempt
that stays pending for good (a contradiction waiting for staff) kept its place for good, so
once a batch's worth of them existed, an attempt a crash left afterwards was never asked about:
its charge was never settled nor its period granted. A batch now takes the attempts never
asked first, then those asked longest ago (`asked_at`), whatever the passes' cadence (a pass
running long delays the next)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from gymctl.billing import attempts, collector
from gymctl.models import Subscription
from gymctl.models.billing import TransactionStatus
from tests.billing import factories as bf
from tests.billing.cards import Sandbox
from tests.billing.crashed_renewals import due_subscription, fresh, rows
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


class TakenAtAnotherAmount:
    """The sandbox, but the provider reports the deals of `skewed` ids at another amount."""

    def __init__(self, inner, skewed: set[str]) -> None:
        self.inner, self.skewed = inner, skewed

    def lookup_charge(self, terminal, unique_id):
        result = self.inner.lookup_charge(terminal, unique_id)
        if unique_id in self.skewed:
            return replace(result, amount_in_cents=(result.amount_in_cents or 0) + 100)
        return result

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _crash_after_the_charge(session_factory, sandbox, subscription_id, at):
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription_id, now=at, cipher=TEST_CIPHER)
        assert began.outcome == "started"
        worker.commit()
        assert attempts.send_attempt(began, sandbox.provider).outcome == "approved"
        worker.rollback()  # ...the process dies before applying the answer
    return began.attempt["externalAttemptId"]


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


def test_a_crashed_attempt_is_resolved_even_behind_a_batch_of_standing_contradictions(
    session, session_factory, sandbox, monkeypatch
):
    monkeypatch.setattr(collector, "RECOVERY_BATCH", 2)  # a batch of 200 in production
    gym = bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))
    stuck = [due_subscription(session, gym, sandbox) for _ in range(2)]
    crashed = due_subscription(session, gym, sandbox)
    skewed = {_crash_after_the_charge(session_factory, sandbox, s.id, NOW) for s in stuck}
    provider = TakenAtAnotherAmount(sandbox.provider, skewed)
    at = NOW + timedelta(minutes=5)
    summary = collector.recover(session_factory, provider, now=at, cipher=TEST_CIPHER)
    assert [a["reason"] for a in summary.alerts] == ["billing_contradiction"] * 2

    # Later, another renewal dies after the provider charged it.
    _crash_after_the_charge(session_factory, sandbox, crashed.id, at + timedelta(minutes=1))
    for _ in range(3):  # passes ten minutes apart: each ran long
        at += timedelta(minutes=10)
        collector.recover(session_factory, provider, now=at, cipher=TEST_CIPHER)

    (attempt,) = rows(session_factory, crashed.id)
    assert attempt.status == TransactionStatus.completed
    assert fresh(session_factory, Subscription, crashed.id).current_period_end > NOW
