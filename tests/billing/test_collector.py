"""The protected collector (spec B 1, 2.2, 3, 6, 8) against the sandbox provider: attempts are
stored before the provider call, settled once, resolved by their stored ids, never charged
twice; crashes between the steps are replayed by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import attempts, collector, no_debit
from gymctl.models import OutboxEvent, PaymentTransaction, Plan, Subscription, Task
from gymctl.models.billing import (
    AttemptKind,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
)
from gymctl.models.organizations import MembershipStatus
from tests.billing import factories as bf
from tests.billing.cards import (
    APPROVE,
    DECLINE,
    TIMEOUT,
    UNKNOWN,
    Sandbox,
    connect_card_provider,
    connect_other_provider,
    save_test_card,
)
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

DUE = NOW - timedelta(minutes=1)


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


def due_subscription(session, gym, sandbox, card=APPROVE, **fields):
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, card)
    values = {
        "payment_method_id": method.id,
        "next_charge_date": DUE,
        "current_period_end": DUE,
        "current_period_start": DUE - timedelta(days=30),
        **fields,
    }
    subscription = bf.make_subscription(session, gym, PlanType.card, **values)
    session.commit()
    return subscription


def collect(session_factory, sandbox, subscription, at=NOW, kind=None):
    summary = collector.Summary()
    outcome = collector.collect_subscription(
        session_factory,
        subscription.id,
        sandbox.provider,
        now=at,
        cipher=TEST_CIPHER,
        summary=summary,
        kind=kind,
    )
    return outcome, summary


def transactions(session, subscription):
    return session.scalars(
        select(PaymentTransaction)
        .where(PaymentTransaction.subscription_id == subscription.id)
        .order_by(PaymentTransaction.created_at)
        .execution_options(populate_existing=True)
    ).all()


def refreshed(session, row):
    session.expire_all()
    return session.get(type(row), row.id)


def events(session, name):
    return session.scalars(select(OutboxEvent).where(OutboxEvent.name == name)).all()


def charges_of(sandbox, transaction):
    return sandbox.simulator.charge_count(transaction.billing_attempt["externalAttemptId"])


def test_an_approved_renewal_settles_once_and_advances_the_period(
    session, session_factory, gym, sandbox
):
    subscription = due_subscription(session, gym, sandbox)
    outcome, summary = collect(session_factory, sandbox, subscription)
    assert outcome == "charged"
    assert summary.charged == 1
    (transaction,) = transactions(session, subscription)
    assert transaction.status == TransactionStatus.completed
    attempt = transaction.billing_attempt
    assert attempt["protocol"] == 1
    assert attempt["terminal"] == "1000"
    assert attempt["amountInCents"] == 9900
    assert attempt["currency"] == "ILS"
    assert attempt["idempotencyKey"]
    assert attempt["externalAttemptId"]
    assert transaction.effects["done"] == ["ledger", "subscription", "membership"]
    assert charges_of(sandbox, transaction) == 1
    subscription = refreshed(session, subscription)
    assert subscription.current_period_start == DUE
    assert subscription.next_charge_date == subscription.current_period_end > NOW
    # A second pass finds nothing due: no second attempt, no second charge.
    assert collect(session_factory, sandbox, subscription)[0] == "skipped"
    assert len(transactions(session, subscription)) == 1


def test_a_decline_opens_debt_with_day_zero_the_decline(session, session_factory, gym, sandbox):
    subscription = due_subscription(session, gym, sandbox, DECLINE)
    outcome, _ = collect(session_factory, sandbox, subscription)
    assert outcome == "declined"
    subscription = refreshed(session, subscription)
    assert subscription.status == SubscriptionStatus.debt
    assert subscription.debt_reason == "charge_failed"
    assert subscription.debt_since == NOW
    assert subscription.debt_amount_in_cents == 9900
    assert subscription.decline_count == 1
    assert subscription.retry_at == NOW + attempts.DEBT_RETRY_INTERVAL
    assert transactions(session, subscription)[0].status == TransactionStatus.failed
    assert len(events(session, "payment.charge_failed")) == 1
    assert len(events(session, "subscription.debt_opened")) == 1


def test_a_debt_retry_decline_keeps_the_debt_and_its_day_zero(
    session, session_factory, gym, sandbox
):
    since = NOW - timedelta(days=2)
    subscription = due_subscription(session, gym, sandbox, DECLINE, in_debt_since=since)
    outcome, _ = collect(session_factory, sandbox, subscription)
    assert outcome == "declined"
    subscription = refreshed(session, subscription)
    assert subscription.debt_since == since
    assert subscription.debt_amount_in_cents == 9900
    assert transactions(session, subscription)[0].attempt_kind == AttemptKind.debt


def test_a_paid_debt_restores_the_debt_columns(session, session_factory, gym, sandbox):
    subscription = due_subscription(session, gym, sandbox, in_debt_since=NOW - timedelta(days=2))
    assert collect(session_factory, sandbox, subscription)[0] == "charged"
    subscription = refreshed(session, subscription)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.debt_amount_in_cents == 0
    assert subscription.debt_since is None
    assert subscription.debt_reason is None


def test_crash_after_the_attempt_is_stored_and_before_the_call(
    session, session_factory, gym, sandbox
):
    """The process dies after committing the attempt: the provider never saw it. Pending
    means unresolved: the next pass is busy, never a second attempt; the recovery asks the
    provider about the stored id (not_found), then the technical retry charges once."""
    subscription = due_subscription(session, gym, sandbox)
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        assert began.outcome == "started"
        worker.commit()
    # ...crash. The next catch-up pass finds the unresolved attempt:
    assert collect(session_factory, sandbox, subscription)[0] == "busy"
    # Inside the 90 s executing grace the recovery leaves it alone.
    early = collector.recover(session_factory, sandbox.provider, now=NOW, cipher=TEST_CIPHER)
    assert early.pending == 1
    later = NOW + attempts.EXECUTING_GRACE
    resolved = collector.recover(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    assert resolved.resolved == 1
    (first,) = transactions(session, subscription)
    assert first.status == TransactionStatus.failed
    assert first.billing_resolution["decision"] == "not_charged"
    subscription = refreshed(session, subscription)
    assert subscription.retry_at == later + timedelta(minutes=5)
    assert collect(session_factory, sandbox, subscription, at=later)[0] == "skipped"
    retry_at = later + timedelta(minutes=5)
    assert collect(session_factory, sandbox, subscription, at=retry_at)[0] == "charged"
    first, second = transactions(session, subscription)
    assert charges_of(sandbox, first) == 0
    assert charges_of(sandbox, second) == 1
    assert second.obligation_key == first.obligation_key


def test_crash_after_the_provider_answered_and_before_the_local_commit(
    session, session_factory, gym, sandbox
):
    """The provider charged, the process died before applying it: the recovery's lookup of
    the stored id finds the approval and settles it; nothing is charged again."""
    subscription = due_subscription(session, gym, sandbox)
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        worker.commit()
        result = attempts.send_attempt(began, sandbox.provider)
        assert result.outcome == "approved"
        worker.rollback()  # ...crash before apply_outcome commits
    later = NOW + timedelta(minutes=5)
    summary = collector.recover(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    assert summary.resolved == 1
    assert summary.charged == 1
    (transaction,) = transactions(session, subscription)
    assert transaction.status == TransactionStatus.completed
    assert charges_of(sandbox, transaction) == 1
    assert refreshed(session, subscription).next_charge_date > later


def test_an_unknown_outcome_stays_pending_and_is_resolved_by_lookup(
    session, session_factory, gym, sandbox
):
    subscription = due_subscription(session, gym, sandbox, UNKNOWN)
    assert collect(session_factory, sandbox, subscription)[0] == "pending"
    (transaction,) = transactions(session, subscription)
    assert transaction.status == TransactionStatus.pending
    assert transaction.billing_attempt["uncertainSince"] == NOW.isoformat()
    # Money moved at the provider although we do not know it yet.
    assert charges_of(sandbox, transaction) == 1
    later = NOW + timedelta(minutes=2)
    collector.recover(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    (transaction,) = transactions(session, subscription)
    assert transaction.status == TransactionStatus.completed
    assert charges_of(sandbox, transaction) == 1


def test_technical_retries_after_5_15_60_minutes_at_most_three_per_obligation(
    session, session_factory, gym, sandbox
):
    subscription = due_subscription(session, gym, sandbox, TIMEOUT)
    at = NOW
    for delay in (5, 15, 60):
        assert collect(session_factory, sandbox, subscription, at=at)[0] == "pending"
        at += attempts.EXECUTING_GRACE
        collector.recover(session_factory, sandbox.provider, now=at, cipher=TEST_CIPHER)
        subscription = refreshed(session, subscription)
        assert subscription.retry_at == at + timedelta(minutes=delay)
        at = subscription.retry_at
    assert collect(session_factory, sandbox, subscription, at=at)[0] == "pending"
    at += attempts.EXECUTING_GRACE
    summary = collector.recover(session_factory, sandbox.provider, now=at, cipher=TEST_CIPHER)
    assert [a["reason"] for a in summary.alerts] == ["technical_retries_exhausted"]
    outcome, summary = collect(session_factory, sandbox, subscription, at=at + timedelta(hours=2))
    assert outcome == "blocked"
    assert summary.alerts[0]["reason"] == "technical_retries_exhausted"
    assert len(transactions(session, subscription)) == 4
    assert sum(charges_of(sandbox, t) for t in transactions(session, subscription)) == 0


def test_a_technical_retry_under_changed_terms_is_blocked_as_retry_terms_changed(
    session, session_factory, gym, sandbox
):
    """A technical retry repeats the confirmed non-charge it follows (spec B 6 alert
    retry_terms_changed): a new price since then is a new charge, not a retry."""
    subscription = due_subscription(session, gym, sandbox, TIMEOUT)
    assert collect(session_factory, sandbox, subscription)[0] == "pending"
    at = NOW + attempts.EXECUTING_GRACE
    collector.recover(session_factory, sandbox.provider, now=at, cipher=TEST_CIPHER)
    subscription = refreshed(session, subscription)
    subscription.price_in_cents += 1000
    session.commit()
    outcome, summary = collect(session_factory, sandbox, subscription, at=subscription.retry_at)
    assert outcome == "blocked"
    assert summary.blocked == 1
    assert [a["reason"] for a in summary.alerts] == ["retry_terms_changed"]
    assert len(transactions(session, subscription)) == 1
    # The owner allows one retry under the new terms (gymctl billing transaction authorize-retry).
    [non_charge] = transactions(session, subscription)
    no_debit.authorize_retry(
        session,
        organization_id=gym.organization.id,
        transaction_id=non_charge.id,
        actor_user_id=gym.owner.id,
        now=subscription.retry_at,
    )
    session.commit()
    # The retry goes out under the new price (this test card never reaches the provider).
    assert collect(session_factory, sandbox, subscription, at=subscription.retry_at)[0] == "pending"
    first, retry = transactions(session, subscription)
    assert retry.amount_in_cents == subscription.price_in_cents == first.amount_in_cents + 1000


def test_presale_is_charged_on_its_opening_day_and_activates(
    session, session_factory, gym, sandbox
):
    opening = NOW + timedelta(days=3)
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator)
    subscription = bf.make_subscription(
        session, gym, PlanType.card, presale_opening=opening, payment_method_id=method.id
    )
    session.commit()
    assert subscription.current_period_end is None
    assert subscription.sessions_remaining is None
    assert collect(session_factory, sandbox, subscription)[0] == "skipped"
    assert collect(session_factory, sandbox, subscription, at=opening)[0] == "charged"
    subscription = refreshed(session, subscription)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.current_period_start == opening
    assert subscription.started_at == opening
    assert len(events(session, "membership.activated")) == 1


def test_presale_card_age_rule_counts_from_terminal_since(session, session_factory, gym, sandbox):
    """A card counts as on the terminal only when saved at least 45 minutes after the
    terminal became active (spec B 8)."""
    terminal_since = NOW - timedelta(hours=1)
    connect_card_provider(session, gym, since=terminal_since, terminal=_other_terminal())
    young = save_test_card(
        session,
        gym,
        sandbox.provider,
        sandbox.simulator,
        saved_at=terminal_since + timedelta(minutes=44),
        terminal=_other_terminal(),
    )
    subscription = bf.make_subscription(
        session, gym, PlanType.card, presale_opening=DUE, payment_method_id=young.id
    )
    session.commit()
    outcome, summary = collect(session_factory, sandbox, subscription)
    assert outcome == "blocked"
    assert summary.blocked == 1
    old_enough = save_test_card(
        session,
        gym,
        sandbox.provider,
        sandbox.simulator,
        saved_at=terminal_since + timedelta(minutes=45),
        terminal=_other_terminal(),
    )
    subscription = refreshed(session, subscription)
    subscription.payment_method_id = old_enough.id
    session.commit()
    assert collect(session_factory, sandbox, subscription)[0] == "charged"


def _other_terminal():
    from gymctl.providers.card import Terminal

    return Terminal(number="2000", api_name="second-terminal")


def test_presale_decline_enters_debt_without_active_owner(session, session_factory, gym, sandbox):
    gym.owner_membership.status = MembershipStatus.cancelled
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, DECLINE)
    subscription = bf.make_subscription(
        session, gym, PlanType.card, presale_opening=DUE, payment_method_id=method.id
    )
    session.commit()
    assert collect(session_factory, sandbox, subscription)[0] == "declined"
    subscription = refreshed(session, subscription)
    assert subscription.status == SubscriptionStatus.debt
    assert subscription.retention_case_kind == "presale_charge_failed"
    (event,) = events(session, "payment.charge_failed")
    assert event.payload["presale"] is True


def test_a_presale_whose_opening_charge_was_declined_starts_when_its_debt_is_paid(
    session, session_factory, gym, sandbox
):
    """ "A presale holds no period, quota or credits before it is paid" (spec B 2.1): paid on
    a retry of its debt, it is granted them then, as on its opening day. The grant took the
    status debt for a renewal: no start, no quota and no membership.activated."""
    opening = NOW + timedelta(days=3)
    declined = save_test_card(session, gym, sandbox.provider, sandbox.simulator, DECLINE)
    subscription = bf.make_subscription(
        session, gym, PlanType.card, presale_opening=opening, payment_method_id=declined.id
    )
    session.get(Plan, subscription.plan_id).sessions_quota = 12
    session.commit()
    assert collect(session_factory, sandbox, subscription, at=opening)[0] == "declined"
    subscription = refreshed(session, subscription)
    assert (subscription.status, subscription.started_at) == (SubscriptionStatus.debt, None)
    subscription.payment_method_id = save_test_card(
        session, gym, sandbox.provider, sandbox.simulator
    ).id
    session.commit()

    paid_at = subscription.retry_at
    assert collect(session_factory, sandbox, subscription, at=paid_at)[0] == "charged"

    subscription = refreshed(session, subscription)
    assert subscription.status == SubscriptionStatus.active
    assert (subscription.started_at, subscription.current_period_start) == (opening, opening)
    assert subscription.sessions_remaining == 12
    (activated,) = events(session, "membership.activated")
    assert activated.payload["periodStart"] == opening.isoformat()


@pytest.mark.parametrize(
    ("drift", "reason"),
    [("debt", "debt_changed"), ("retry_date", "retry_date_changed")],
)
def test_settlement_drift_never_holds_back_a_settled_outcome(
    session, session_factory, gym, sandbox, drift, reason
):
    """The ledger settles; settlementReview records why nothing was granted and an urgent
    payment_follow_up task opens (spec B 7)."""
    subscription = due_subscription(session, gym, sandbox, in_debt_since=NOW - timedelta(days=1))
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        worker.commit()
        result = attempts.send_attempt(began, sandbox.provider)
    with session_factory() as staff:  # staff act while the charge is in flight
        row = staff.get(Subscription, subscription.id)
        if drift == "debt":
            row.debt_amount_in_cents = 5000
        else:
            row.next_charge_date = NOW + timedelta(days=3)
        staff.commit()
    with session_factory() as worker:
        applied = attempts.apply_outcome(worker, began.transaction_id, result, now=NOW)
        worker.commit()
    assert applied.outcome == "charged"
    assert applied.alert == f"settlement_review:{reason}"
    (transaction,) = transactions(session, subscription)
    assert transaction.status == TransactionStatus.completed
    assert transaction.billing_attempt["settlementReview"]["reason"] == reason
    assert transaction.effects["done"] == ["ledger"]
    assert refreshed(session, subscription).status == SubscriptionStatus.debt
    (task,) = session.scalars(select(Task).where(Task.kind == "payment_follow_up")).all()
    assert task.priority == "urgent"
    assert task.subject_id == str(transaction.id)


def test_a_success_for_another_amount_is_a_contradiction_left_pending(
    session, session_factory, gym, sandbox
):
    from gymctl.providers.card import ChargeResult, Outcome

    subscription = due_subscription(session, gym, sandbox)
    with session_factory() as worker:
        began = attempts.begin_attempt(worker, subscription.id, now=NOW, cipher=TEST_CIPHER)
        worker.commit()
        claimed = ChargeResult(Outcome.approved, "x", transaction_id="77", amount_in_cents=1)
        applied = attempts.apply_outcome(worker, began.transaction_id, claimed, now=NOW)
        worker.commit()
    assert applied.outcome == "contradiction"
    assert applied.alert == "billing_contradiction"
    assert transactions(session, subscription)[0].status == TransactionStatus.pending


def test_collection_paused_by_owner_blocks_with_an_alert(session, session_factory, gym, sandbox):
    subscription = due_subscription(session, gym, sandbox, collection_paused=True)
    outcome, summary = collect(session_factory, sandbox, subscription)
    assert outcome == "blocked"
    assert summary.alerts[0]["reason"] == "collection_paused_by_owner"
    assert transactions(session, subscription) == []


def test_catch_up_takes_20_organizations_and_5_subscriptions_each(
    session, session_factory, sandbox
):
    subscriptions = []
    for _ in range(21):
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        for _ in range(6):
            subscriptions.append(due_subscription(session, gym, sandbox))
    summary = collector.catch_up(session_factory, sandbox.provider, now=NOW, cipher=TEST_CIPHER)
    assert summary.organizations == 20
    assert summary.selected == 100
    assert summary.charged == 100
    assert summary.completed
    assert summary.useful


def test_catch_up_starts_no_new_work_after_its_budget(session, session_factory, gym, sandbox):
    for _ in range(3):
        due_subscription(session, gym, sandbox)
    ticks = iter([0.0, 0.0, 10.0, 31.0, 32.0])
    summary = collector.catch_up(
        session_factory,
        sandbox.provider,
        now=NOW,
        cipher=TEST_CIPHER,
        monotonic=lambda: next(ticks),
    )
    assert summary.charged == 2
    assert summary.skipped == 1
    assert not summary.completed
    assert not summary.useful


def test_other_providers_keep_provider_direct_collection(session, session_factory, sandbox):
    gym = bf.make_gym(session)
    connect_other_provider(session, gym, "direct_debit")
    due_subscription(session, gym, sandbox)
    summary = collector.catch_up(session_factory, sandbox.provider, now=NOW, cipher=TEST_CIPHER)
    assert summary.selected == 0
    assert summary.unevaluable == 1
