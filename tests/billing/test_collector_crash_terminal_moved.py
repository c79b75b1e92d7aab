"""A renewal charged at the provider whose answer died with the process, then the gym moves to a
new terminal (the old one's credentials are kept, spec B 4.1/4.2: "look up the original merchant
account"). The recovery every 5 minutes must still resolve it on the terminal that took it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import attempts
from gymctl.models import Subscription
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card import Terminal
from tests.billing import factories as bf
from tests.billing.cards import Sandbox, connect_card_provider
from tests.billing.crashed_renewals import due_subscription, fresh, provider_charges, recover, rows
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


def test_recovery_resolves_a_charged_attempt_on_the_original_terminal_after_a_terminal_move(
    session, session_factory, gym, sandbox
):
    subscription = due_subscription(session, gym, sandbox)
    period_end = subscription.current_period_end
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        assert began.outcome == "started"
        worker.commit()
        assert attempts.send_attempt(began, sandbox.provider).outcome == "approved"
        worker.rollback()  # ...the process dies before applying the answer
    # The owner moves the gym to a new terminal; the old account's credentials are kept.
    connect_card_provider(session, gym, terminal=Terminal("2000", "second"), since=NOW)
    session.commit()

    at = NOW + timedelta(minutes=5)
    for _ in range(3):  # recovery passes every 5 minutes
        recover(session_factory, sandbox, at)
        at += timedelta(minutes=5)

    (attempt,) = rows(session_factory, subscription.id)
    assert len(provider_charges(sandbox, [attempt])) == 1  # the money really was taken
    # The charge the provider took on the original terminal is settled and the period granted.
    assert attempt.status == TransactionStatus.completed
    after = fresh(session_factory, Subscription, subscription.id)
    assert after.current_period_end > period_end
