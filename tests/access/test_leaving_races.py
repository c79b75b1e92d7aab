"""A membership's plans ended (gymctl.access.leaving.end_holdings) while the billing area holds
the same subscription, on PostgreSQL with real commits seen across connections. Billing locks in
the fixed order organization, membership, subscription (spec B 4.1; attempts.lock_subscription)
and so does end_holdings: it waits for the collector or the period-end sweep to commit, then
ends what their commit left, never a copy read before it.

A deleted gym is the ending that takes no membership lock of its own (removal and erasure
write the membership row first), so it is the one raced here."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import select, text
from sqlalchemy.orm import sessionmaker

from gymctl.access.gyms import delete_organization
from gymctl.billing import attempts
from gymctl.db import get_engine
from gymctl.models import AuditLog, Organization, Subscription
from gymctl.models.billing import SubscriptionStatus
from gymctl.providers.card import ChargeResult, Outcome
from gymctl.retention.settlement import NOTICE, settle_one
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import doors, give_notice, mailer, paid_card_subscription  # noqa: F401

D = timedelta(days=1)


def _waiting_on_a_lock(engine) -> bool:
    with engine.connect() as connection:
        return bool(connection.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")))


def _gym_deleted_meanwhile(factory, engine, first, organization_id, owner_id, *, now) -> None:
    """Delete the gym in another connection while `first` holds the subscription uncommitted;
    commit `first` once the deletion waits on its lock."""
    errors: list[BaseException] = []
    done = threading.Event()

    def delete() -> None:
        try:
            with factory() as second:
                organization = second.get(Organization, organization_id)
                delete_organization(second, organization, actor_user_id=owner_id, now=now)
                second.commit()
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            done.set()

    thread = threading.Thread(target=delete)
    thread.start()
    deadline = time.monotonic() + 10
    while not done.is_set() and not _waiting_on_a_lock(engine) and time.monotonic() < deadline:
        time.sleep(0.02)
    waited = not done.is_set()
    first.commit()
    thread.join(timeout=30)
    assert errors == []
    assert waited  # the deletion met the uncommitted row: the race was run


def test_a_gym_deleted_while_the_sweep_settles_a_notice_leaves_the_settlement_as_it_is(
    committed_pg,
    card_server,  # noqa: F811
    doors,  # noqa: F811
):
    """The sweep settled the notice (cancelled at its effective date, a refund owed) while the
    gym was being deleted: the deletion finds the plan ended and ends nothing. Before, it ended
    its own copy read before the sweep's commit: the plan said membership_ended at the
    deletion's instant, its notice `overtaken` though settled and refunded."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 400 * D)
        subscription, _ = paid_card_subscription(
            session, gym, card_server, current_period_end=NOW + 40 * D
        )
        give_notice(session, gym, subscription, now=NOW - 30 * D)
        subscription.cancellation_effective_at = NOW
        session.commit()
    later = NOW + timedelta(minutes=5)
    with factory() as first:
        locked = attempts.lock_subscription(first, subscription.id)
        settlement = settle_one(first, locked, doors, now=later)
        assert settlement.amount_in_cents == 4000  # 36500 x 40 / 365
        _gym_deleted_meanwhile(
            factory, engine, first, gym.organization.id, gym.owner.id, now=later + D
        )

    with factory() as session:
        ended = session.get(Subscription, subscription.id)
        assert ended.status == SubscriptionStatus.cancelled
        assert (ended.cancellation_reason, ended.ended_at) == (NOTICE, NOW)
        assert ended.cancellation_effective_at == NOW  # the settled notice's record stays
        actions = session.scalars(
            select(AuditLog.action).where(AuditLog.target_id == str(subscription.id))
        ).all()
        assert "subscription.cancellation_settled" in actions
        assert "subscription.notice_overtaken" not in actions


def test_a_gym_deleted_while_a_renewal_is_declined_ends_the_plan_the_decline_left(committed_pg):
    """The collector declined the renewal (debt opened, a retry set for tomorrow) while the
    gym was being deleted: the deletion ends the plan as the decline left it, nothing retried.
    Before, it wrote its copy read before the decline over it: the plan was cancelled with the
    decline's retry date still set, a state no order of the two leaves."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - 60 * D)
        card = bf.make_card(session, gym, user=gym.member)
        subscription = bf.make_subscription(session, gym, payment_method_id=card.id)
        session.commit()
    due = subscription.next_charge_date
    with factory() as session:
        began = attempts.begin_attempt(session, subscription.id, now=due, cipher=TEST_CIPHER)
        assert began.outcome == "started"
        session.commit()
    with factory() as first:
        declined = ChargeResult(Outcome.declined, began.attempt["externalAttemptId"])
        assert attempts.apply_outcome(first, began.transaction_id, declined, now=due).outcome == (
            "declined"
        )
        first.flush()
        _gym_deleted_meanwhile(
            factory, engine, first, gym.organization.id, gym.owner.id, now=due + D / 2
        )

    with factory() as session:
        ended = session.get(Subscription, subscription.id)
        assert ended.status == SubscriptionStatus.cancelled
        assert ended.cancellation_reason == "membership_ended"
        assert (ended.next_charge_date, ended.retry_at) == (None, None)
        assert ended.debt_amount_in_cents == ended.price_in_cents  # what it owes stays owed
