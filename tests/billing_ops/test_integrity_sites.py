"""The billing sites that expect a unique violation (one pending attempt per subscription, one
transaction per idempotency key, one live holder of a recurring plan) answer it as before and
let any other integrity error surface instead of answering it as the duplicate."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from gymctl.billing import attempts, credit_notes, desk
from gymctl.billing.credit_notes import CreditNoteRequest, file_credit_note
from gymctl.billing.desk import DeskChargeRequest
from gymctl.billing.plans import new_subscription
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import CollectionMethod, SubscriptionStatus
from tests.billing import factories as bf
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import card_subscription, charge_at_desk, paid_charge
from tests.conftest import NOW
from tests.lost_race import miss_once, orphan_with

pytestmark = pytest.mark.embedded


def _transactions(session) -> int:
    return session.scalar(select(func.count()).select_from(PaymentTransaction))


def test_a_second_collector_is_busy_and_a_foreign_key_failure_surfaces(
    engine, session, gym, card_server, monkeypatch
):
    subscription = card_subscription(session, gym, card_server)
    session.commit()
    with orphan_with(session, PaymentTransaction), pytest.raises(IntegrityError):
        attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    session.rollback()
    assert _transactions(session) == 0

    began = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert began.outcome == "started"
    session.commit()
    # Checked too early: the other collector stores its attempt after the check.
    monkeypatch.setattr(attempts, "ledger_checks", lambda *args: (False, 0))
    again = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert (again.outcome, again.reason) == ("busy", "unresolved_attempt")
    assert _transactions(session) == 1


def _request(gym, key) -> DeskChargeRequest:
    return DeskChargeRequest(
        idempotency_key=key,
        user_id=gym.member.id,
        amount_in_cents=4500,
        currency="ILS",
        description="towel",
    )


def test_a_desk_charge_stored_first_by_a_twin_is_replayed_and_a_foreign_key_failure_surfaces(
    engine, session, session_factory, gym, card_server, provider, documents, monkeypatch
):
    card_subscription(session, gym, card_server)  # the member's saved card
    session.commit()
    with orphan_with(session_factory, PaymentTransaction), pytest.raises(IntegrityError):
        charge_at_desk(session_factory, gym, provider, documents, _request(gym, uuid.uuid4()))
    assert _transactions(session) == 0

    key = uuid.uuid4()
    first = charge_at_desk(session_factory, gym, provider, documents, _request(gym, key))
    miss_once(monkeypatch, desk, "by_key")
    twin = charge_at_desk(session_factory, gym, provider, documents, _request(gym, key))
    assert (twin["outcome"], twin["replayed"]) == (first["outcome"], True)
    assert twin["transaction"]["id"] == first["transaction"]["id"]
    assert _transactions(session) == 1


def test_a_credit_note_filed_first_by_a_twin_is_its_answer_and_a_foreign_key_failure_surfaces(
    engine, session, gym, card_server, documents, monkeypatch
):
    sale = paid_charge(session, gym, card_server, amount=10000)
    before = _transactions(session)

    def file(key):
        return file_credit_note(
            session,
            organization_id=gym.organization.id,
            sale_id=sale.id,
            request=CreditNoteRequest(key, 3000, True, "damaged towel"),
            actor_user_id=gym.owner.id,
            now=NOW,
            documents=documents,
        )

    with orphan_with(session, PaymentTransaction), pytest.raises(IntegrityError):
        file(uuid.uuid4())
    assert _transactions(session) == before

    key = uuid.uuid4()
    first = file(key)
    miss_once(monkeypatch, credit_notes, "by_key")
    twin = file(key)
    assert twin["replayed"] is True
    assert twin["creditNote"] == first["creditNote"]
    assert _transactions(session) == before + 1


def test_a_plan_bought_twice_at_once_is_held_and_other_failures_surface(engine, session):
    place = bf.make_gym(session)
    plan = bf.make_plan(session, place.organization, interval_months=1)
    held = bf.make_subscription(session, place, plan=plan, status=SubscriptionStatus.active)
    buy = {"status": SubscriptionStatus.scheduled, "method": CollectionMethod.cash, "now": NOW}
    with pytest.raises(DomainError) as refused:
        new_subscription(session, plan, place.membership, **buy)
    assert (refused.value.code, refused.value.status) == ("plan_already_held", 409)
    assert refused.value.details["subscriptionId"] == str(held.id)

    with pytest.raises(IntegrityError):
        new_subscription(session, plan, place.membership, **{**buy, "now": None})
    other = bf.make_plan(session, place.organization, interval_months=1)
    with orphan_with(session, Subscription), pytest.raises(IntegrityError):
        new_subscription(session, other, place.membership, **buy)
    assert session.scalar(select(func.count()).select_from(Subscription)) == 1
