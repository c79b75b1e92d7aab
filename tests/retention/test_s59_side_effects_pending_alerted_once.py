"""settlement_side_effects_pending is raised once per state, not every 5 minutes (s56 noticed
it, left it).

Spec B 6 names the collector alert reason settlement_side_effects_pending; spec B 8 runs
"side-effect recovery every 5 minutes". A settled payment whose effects wait for staff (a
settlement review) paged again at every pass until someone acted: 288 pages a day for one
payment. As every collector alert (billing.alerts: "raised once per state change"), it pages
once, and again only after the subscription's state changed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing.collector import SIDE_EFFECTS_STALE, side_effect_recovery
from tests.billing import factories as bf
from tests.conftest import NOW

PASS = timedelta(minutes=5)
pytestmark = pytest.mark.embedded  # the demo gym's members pay by card


def review_waiting(session, gym, subscription=None):
    """A card charge settled but not granted (a settlement review left its effects open), of
    `subscription` (a new one by default)."""
    subscription = subscription or bf.make_subscription(session, gym)
    transaction = bf.make_transaction(
        session,
        gym,
        subscription_id=subscription.id,
        provider="card_provider",
        now=NOW - SIDE_EFFECTS_STALE,
        effects={"done": ["ledger"], "at": (NOW - SIDE_EFFECTS_STALE).isoformat()},
    )
    session.commit()
    return subscription, transaction


def _reasons(summary) -> list[str]:
    return [alert["reason"] for alert in summary.alerts]


def test_the_first_pass_alerts_and_the_next_stay_quiet(session, session_factory, gym):
    subscription, transaction = review_waiting(session, gym)

    first = side_effect_recovery(session_factory, now=NOW)
    assert first.alerts == [
        {
            "reason": "settlement_side_effects_pending",
            "transactionId": str(transaction.id),
            "subscriptionId": str(subscription.id),
        }
    ]
    for n in (1, 2):
        later = side_effect_recovery(session_factory, now=NOW + n * PASS)
        assert later.selected == 1  # still waiting for staff, still counted
        assert later.alerts == []


def test_it_alerts_again_after_the_subscription_changed_state(session, session_factory, gym):
    """Another alert raised on the plan since (its collection blocked, say) is a new state:
    the pending effects are told again, once."""
    subscription, _ = review_waiting(session, gym)
    assert _reasons(side_effect_recovery(session_factory, now=NOW)) == [
        "settlement_side_effects_pending"
    ]
    subscription.billing_alert = "technical_retries_exhausted"
    session.commit()

    assert _reasons(side_effect_recovery(session_factory, now=NOW + PASS)) == [
        "settlement_side_effects_pending"
    ]
    assert side_effect_recovery(session_factory, now=NOW + 2 * PASS).alerts == []
