"""authorize-retry on a technical non-charge reaches the collector only through the last
non-charge of the charge owed now (attempts.decides_retry). Spec B 4.2: it "resume[s] a
confirmed non-debit obligation left paused"; docs/decisions.md (billing operator tools): one
more attempt past technical_retries_exhausted. The collector reads the authorization of the
obligation's last confirmed non-charge only, so authorizing an older one answered
retry_authorized while the collector and readiness stayed blocked: the owner was told a retry
would run, and none ever did. It is refused (409 billing_retry_not_available, nothing
written), and the inspect hint offers it on the last one only."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import attempts, no_debit
from gymctl.billing.resolution import describe
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction
from gymctl.models.billing import AttemptKind, SubscriptionStatus, TransactionStatus
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import audit_rows, card_subscription, pending_attempt
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _non_charge(session, subscription, minutes_ago: int):
    attempt = pending_attempt(session, subscription, now=NOW - timedelta(minutes=minutes_ago))
    attempt.status = TransactionStatus.failed
    attempt.billing_resolution = {"decision": "not_charged"}
    session.flush()
    return attempt


def _authorize(session, gym, transaction):
    return no_debit.authorize_retry(
        session,
        organization_id=gym.organization.id,
        transaction_id=transaction.id,
        actor_user_id=gym.owner.id,
        now=NOW,
    )


def test_only_the_last_non_charge_of_the_charge_owed_authorizes_its_retry(
    engine, session, gym, card_server
):
    subscription = card_subscription(session, gym, card_server)
    first, *_, last = [_non_charge(session, subscription, m) for m in (9, 8, 7, 6)]
    blocked = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert (blocked.outcome, blocked.reason) == ("blocked", "technical_retries_exhausted")
    assert describe(session, first, now=NOW)["actions"]["authorizeRetry"] is False
    assert describe(session, last, now=NOW)["actions"]["authorizeRetry"] is True

    with pytest.raises(DomainError) as refused:
        _authorize(session, gym, first)

    assert (refused.value.code, refused.value.status) == ("billing_retry_not_available", 409)
    session.expire_all()
    assert "retryAuthorized" not in (first.billing_resolution or {})
    assert audit_rows(session, "billing.retry_authorized") == []

    assert _authorize(session, gym, last)["outcome"] == "retry_authorized"
    session.flush()
    began = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert began.outcome == "started"


def test_the_member_pay_debt_of_an_ended_plan_is_authorized_on_its_own_charge(
    engine, session, gym, card_server
):
    """A plan cancelled for non-payment keeps its debt, which only the member's pay-debt
    collects (a debt attempt of the debt's day 0): its last technical non-charge decides the
    next pay-debt's retry, though the collector would charge nothing there."""
    since = NOW - timedelta(days=10)
    subscription = card_subscription(
        session,
        gym,
        card_server,
        status=SubscriptionStatus.cancelled,
        debt_since=since,
        debt_amount_in_cents=8000,
    )
    for minutes in (9, 8, 7, 6):
        attempt = attempts.begin_attempt(
            session,
            subscription.id,
            now=NOW - timedelta(minutes=minutes),
            cipher=TEST_CIPHER,
            kind=AttemptKind.debt,
        )
        assert attempt.outcome == "started", attempt
        session.flush()
        last = session.get(PaymentTransaction, attempt.transaction_id)
        last.status = TransactionStatus.failed
        last.billing_resolution = {"decision": "not_charged"}
        session.flush()
    assert describe(session, last, now=NOW)["actions"]["authorizeRetry"] is True
    assert _authorize(session, gym, last)["outcome"] == "retry_authorized"
    session.flush()
    began = attempts.begin_attempt(
        session, subscription.id, now=NOW, cipher=TEST_CIPHER, kind=AttemptKind.debt
    )
    assert began.outcome == "started"
