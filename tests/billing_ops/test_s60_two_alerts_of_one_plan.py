"""Two alerts of one plan each page once (s59 noticed, left it): a plan whose collection the
owner paused (the collector's alert collection_paused_by_owner, every minute's pass) and whose
settled payment waits for staff (settlement_side_effects_pending, every 5 minutes). Both kept
their told-once mark on the plan's one `billing_alert`: each pass swapped it, and both paged at
every pass, 1,440 and 288 pages a day. The pending effects' mark is the payment's own now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import collector
from gymctl.billing.collector import side_effect_recovery
from gymctl.models import PaymentTransaction
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import card_subscription
from tests.conftest import NOW
from tests.retention.test_s59_side_effects_pending_alerted_once import review_waiting

MINUTE = timedelta(minutes=1)
pytestmark = pytest.mark.embedded  # the demo gym's members pay by card


def _paused_with_a_review_waiting(session, gym, card_server):
    paused = card_subscription(session, gym, card_server, collection_paused=True)
    return review_waiting(session, gym, paused)


def test_a_paused_plan_with_pending_effects_pages_once_for_each(
    session, session_factory, gym, card_server
):
    _paused_with_a_review_waiting(session, gym, card_server)
    told = []
    for minute in range(11):  # the catch-up every minute, the recovery every fifth
        at = NOW + minute * MINUTE
        summary = collector.catch_up(
            session_factory, card_server.provider(), now=at, cipher=TEST_CIPHER
        )
        assert summary.blocked == 1, summary
        told += [alert["reason"] for alert in summary.alerts]
        if minute % 5 == 0:
            recovery = side_effect_recovery(session_factory, now=at)
            assert recovery.selected == 1  # still waiting for staff, still counted
            told += [alert["reason"] for alert in recovery.alerts]

    assert told == ["collection_paused_by_owner", "settlement_side_effects_pending"]


def test_a_payment_without_its_plan_is_told_once(session, session_factory, gym, card_server):
    """Its plan's row deleted, the mark was nowhere to keep and it paged every pass."""
    _, payment = _paused_with_a_review_waiting(session, gym, card_server)
    payment.subscription_id = None
    session.commit()

    reasons = [
        [
            alert["reason"]
            for alert in side_effect_recovery(session_factory, now=NOW + n * 5 * MINUTE).alerts
        ]
        for n in range(3)
    ]

    assert reasons == [["settlement_side_effects_pending"], [], []]


def test_the_mark_keeps_what_staff_wrote_and_a_closed_payment_is_told_no_more(
    session, session_factory, gym, card_server
):
    """The mark is written into the effects record beside what is there (its plan's mark, none
    here, and when); once every effect is delivered the payment is neither told nor counted."""
    _, payment = _paused_with_a_review_waiting(session, gym, card_server)
    assert side_effect_recovery(session_factory, now=NOW).alerts != []
    session.expire_all()
    effects = session.scalar(
        select(PaymentTransaction.effects).where(PaymentTransaction.id == payment.id)
    )
    assert effects["done"] == ["ledger"]
    assert effects[collector.TOLD] == {"state": None, "at": NOW.isoformat()}

    payment = session.get(PaymentTransaction, payment.id)
    payment.effects = {"done": ["ledger", "subscription", "membership"], "at": NOW.isoformat()}
    session.commit()
    later = side_effect_recovery(session_factory, now=NOW + 5 * MINUTE)
    assert (later.selected, later.alerts) == (0, [])
