"""A long collector pass beside the recovery pass (spec B 8): an attempt's 90 s executing
grace counts from when the attempt was stored, and a charge's answer that comes back after its
attempt was closed as not charged is never dropped.

A daily sweep of a thousand renewals runs for many minutes, each charge a provider call; the
recovery job runs every 5 minutes beside it, in another daemon. Each provider call here first
runs that recovery pass, at the moment the charge's request is still on its way (the provider
has not seen it: a lookup says "not found"), then lets the charge through."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import attempts, collector, readiness, resolution
from gymctl.errors import DomainError
from gymctl.models import OutboxEvent, PaymentTransaction, Subscription, Task
from gymctl.models.billing import PlanType, SubscriptionStatus, TransactionStatus
from gymctl.providers.card import ChargeResult, Outcome
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import dismiss
from tests.conftest import NOW

DUE = NOW - timedelta(hours=3)
CHARGE_SECONDS = 600  # a slow provider: each charge's call takes ten minutes of the pass
LOOKUP_SECONDS = 60  # ...and each lookup a minute


class RecoveryBeside:
    """The sandbox provider, with a recovery pass run (at `recovery_at(n)` for the n-th charge,
    None: none) while each charge's request is on its way; `ran` is the pass's own clock
    (collector's `monotonic`), moved on by each call."""

    def __init__(self, sandbox, session_factory, recovery_at):
        self.sandbox = sandbox
        self.session_factory = session_factory
        self.recovery_at = recovery_at
        self.ran = 0.0
        self.charges = 0
        self.recoveries: list[collector.Summary] = []

    def monotonic(self) -> float:
        return self.ran

    def lookup_charge(self, terminal, unique_id):
        self.ran += LOOKUP_SECONDS
        return self.sandbox.provider.lookup_charge(terminal, unique_id)

    def charge_token(self, terminal, **charge):
        self.charges += 1
        at = self.recovery_at(self.charges)
        if at is not None:
            self.recoveries.append(
                collector.recover(
                    self.session_factory, self.sandbox.provider, now=at, cipher=TEST_CIPHER
                )
            )
        answer = self.sandbox.provider.charge_token(terminal, **charge)
        self.ran += CHARGE_SECONDS
        return answer

    def __getattr__(self, name):
        return getattr(self.sandbox.provider, name)


def members_due(session, gym, sandbox, count):
    subscriptions = []
    for _ in range(count):
        user = factories.user(session)
        membership = factories.membership(session, user=user, organization=gym.organization)
        card = save_test_card(session, gym, sandbox.provider, sandbox.simulator, user=user)
        subscriptions.append(
            bf.make_subscription(
                session,
                gym,
                PlanType.card,
                membership=membership,
                payment_method_id=card.id,
                next_charge_date=DUE,
                current_period_end=DUE,
                current_period_start=DUE - timedelta(days=30),
            )
        )
    session.commit()
    return subscriptions


def ledger(session, subscription):
    return session.scalars(
        select(PaymentTransaction)
        .where(PaymentTransaction.subscription_id == subscription.id)
        .order_by(PaymentTransaction.created_at)
        .execution_options(populate_existing=True)
    ).all()


def charged_by_the_provider(sandbox, session, subscription):
    return sum(
        sandbox.simulator.charge_count(t.billing_attempt["externalAttemptId"])
        for t in ledger(session, subscription)
    )


@pytest.fixture
def sandbox(tmp_path):
    return Sandbox(tmp_path)


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


@pytest.mark.embedded
def test_an_attempt_stored_late_in_a_long_sweep_is_inside_its_grace_for_the_recovery(
    session, session_factory, gym, sandbox
):
    """ "EXECUTING_GRACE: an attempt this young may still be running" (spec B 8): young from
    when it was stored. The sweep's second charge begins ten minutes into the 02:00 pass; a
    recovery pass a minute after that finds its attempt pending and leaves it alone. Stamped
    with the pass's 02:00, it looked eleven minutes old: the recovery asked the provider,
    took "not found" for a confirmed non-charge, and the charge's approval was then dropped
    while the technical retry charged the member again."""
    first, second = members_due(session, gym, sandbox, 2)
    provider = RecoveryBeside(
        sandbox,
        session_factory,
        lambda n: NOW + timedelta(seconds=CHARGE_SECONDS + 60) if n == 2 else None,
    )

    summary = collector.daily_sweep(
        session_factory, provider, now=NOW, cipher=TEST_CIPHER, monotonic=provider.monotonic
    )

    assert summary.charged == 2
    (beside,) = provider.recoveries
    assert (beside.pending, beside.resolved) == (1, 0)
    began = []
    for subscription in (first, second):
        (transaction,) = ledger(session, subscription)
        assert transaction.status == TransactionStatus.completed
        assert transaction.billing_attempt["startedAt"] == transaction.created_at.isoformat()
        began.append(transaction.created_at)
        assert charged_by_the_provider(sandbox, session, subscription) == 1
        session.refresh(subscription)
        assert subscription.status == SubscriptionStatus.active
        assert subscription.next_charge_date > NOW
    # The charges began at 02:00 and ten minutes in (in the due scan's order).
    assert sorted(began) == [NOW, NOW + timedelta(seconds=CHARGE_SECONDS)]


@pytest.mark.embedded
def test_a_charge_answered_after_its_attempt_was_closed_as_not_charged_is_not_dropped(
    session, session_factory, gym, sandbox
):
    """A provider slower than the grace: the recovery's lookup, two minutes in, finds nothing
    and closes the attempt as a technical non-charge; then the charge's own answer comes back
    approved. It reopens the attempt (no newer one holds the subscription), holds collection,
    files an urgent follow-up and writes the audit row: the technical retry does not charge
    the member again, and the next recovery settles the reopened attempt by its stored id."""
    (subscription,) = members_due(session, gym, sandbox, 1)
    provider = RecoveryBeside(sandbox, session_factory, lambda n: NOW + timedelta(minutes=2))

    summary = collector.daily_sweep(
        session_factory, provider, now=NOW, cipher=TEST_CIPHER, monotonic=lambda: 0.0
    )

    (beside,) = provider.recoveries
    assert beside.resolved == 1  # closed as not charged while the charge was on its way
    assert summary.charged == 0
    assert [a["reason"] for a in summary.alerts] == ["collection_held:late_positive_evidence"]
    (transaction,) = ledger(session, subscription)
    assert transaction.status == TransactionStatus.pending
    assert transaction.billing_resolution["decision"] == attempts.REOPENED
    assert transaction.billing_resolution["lateEvidence"]["answer"] == "approved"
    session.refresh(subscription)
    assert subscription.collection_paused is True
    assert subscription.collection_hold == attempts.LATE_POSITIVE_EVIDENCE
    task = session.scalar(select(Task).where(Task.subject_id == str(transaction.id)))
    assert (task.kind, task.priority) == ("payment_follow_up", "urgent")
    audit = session.scalar(
        select(OutboxEvent).where(OutboxEvent.name == "billing.late_positive_evidence")
    )
    assert audit.payload["movedToPending"] is True

    # The technical retry's time comes: the reopened attempt holds the subscription.
    retry = NOW + timedelta(minutes=10)
    busy = collector.catch_up(session_factory, sandbox.provider, now=retry, cipher=TEST_CIPHER)
    assert (busy.selected, busy.charged) == (1, 0)
    assert charged_by_the_provider(sandbox, session, subscription) == 1
    # The recovery asks about the stored id and settles it; the hold it put is lifted.
    settled = collector.recover(session_factory, sandbox.provider, now=retry, cipher=TEST_CIPHER)
    assert settled.charged == 1
    (transaction,) = ledger(session, subscription)
    assert transaction.status == TransactionStatus.completed
    subscription = session.get(Subscription, subscription.id, populate_existing=True)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.next_charge_date > NOW
    assert (subscription.collection_paused, subscription.collection_hold) == (False, None)
    assert charged_by_the_provider(sandbox, session, subscription) == 1


@pytest.mark.embedded
def test_a_debt_retried_by_the_recovery_after_its_lookups_begins_when_they_are_done(
    session, session_factory, gym, sandbox
):
    """The recovery pass looks up every pending attempt first (up to 200, each a provider
    call), then retries the debts whose day has come: its charges begin after the lookups,
    and their attempts say so."""
    *crashed, in_debt = members_due(session, gym, sandbox, 4)
    for subscription in crashed:  # each left an attempt pending: stored, never sent
        with session_factory() as worker:
            attempts.begin_attempt(worker, subscription.id, now=DUE, cipher=TEST_CIPHER)
            worker.commit()
    in_debt.status, in_debt.debt_since = SubscriptionStatus.debt, DUE
    in_debt.debt_amount_in_cents, in_debt.retry_at = in_debt.price_in_cents, DUE
    session.commit()
    provider = RecoveryBeside(sandbox, session_factory, lambda n: None)
    at = NOW + timedelta(minutes=5)

    summary = collector.recover(
        session_factory, provider, now=at, cipher=TEST_CIPHER, monotonic=provider.monotonic
    )

    assert (summary.resolved, summary.charged) == (3, 1)
    (debt,) = ledger(session, in_debt)
    assert (
        debt.billing_attempt["startedAt"]
        == (at + 3 * timedelta(seconds=LOOKUP_SECONDS)).isoformat()
    )


@pytest.mark.embedded
def test_a_late_approval_with_a_newer_attempt_waits_for_it_and_is_reopened_by_reconcile(
    session, session_factory, gym, sandbox
):
    """Only one attempt of a subscription is pending at a time: the first attempt's approval,
    coming back after the technical retry's attempt was stored, cannot reopen it yet. It is
    no technical non-charge any more (no retry to count or authorize), collection is held,
    and once the newer attempt is resolved the operator's reconcile reopens it; the recovery
    settles it by its stored id and lifts the hold. The member is charged once."""
    (subscription,) = members_due(session, gym, sandbox, 1)
    with session_factory() as first:
        on_its_way = attempts.begin_attempt(first, subscription.id, now=NOW, cipher=TEST_CIPHER)
        first.commit()
    later = NOW + timedelta(minutes=2)
    collector.recover(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    retry = later + attempts.TECHNICAL_RETRY_DELAYS[0]
    with session_factory() as second:
        newer = attempts.begin_attempt(second, subscription.id, now=retry, cipher=TEST_CIPHER)
        assert newer.outcome == attempts.BeganOutcome.started
        second.commit()
    answer = attempts.send_attempt(on_its_way, sandbox.provider)  # arrives at last: approved

    with session_factory() as applying:
        applied = attempts.apply_outcome(applying, on_its_way.transaction_id, answer, now=retry)
        applying.commit()

    assert applied.outcome == attempts.AppliedOutcome.late_positive_evidence
    first_row = session.get(PaymentTransaction, on_its_way.transaction_id, populate_existing=True)
    assert first_row.status == TransactionStatus.failed
    assert first_row.billing_resolution["decision"] == attempts.CHARGED_AFTER_CLOSING
    obligation = first_row.obligation_key
    assert attempts.technical_failures(session, obligation) == 0
    seen = resolution.inspect(session, gym.organization.id, first_row.id, now=retry)
    assert seen["state"] == "charged_after_closing"
    assert seen["actions"] == {
        "reconcile": True,
        "confirmNoDebit": False,
        "authorizeRetry": False,
        "settleContradiction": False,
    }
    session.expire_all()  # read as a request would, afresh
    report = readiness.readiness(
        session, gym.organization.id, now=retry, cipher=TEST_CIPHER, only=subscription.id
    )
    (item,) = report["items"]
    assert item["retries"]["declinedAttempts"] == 0  # charged, not declined
    assert item["retries"]["pendingAttempts"] == 1  # the newer one
    codes = {issue["code"] for issue in item["issues"]}
    assert "collection_held" in codes  # the system's hold: a payment to resolve
    assert "collection_paused_by_owner" not in codes
    # The gym holds the member's money and the ledger says failed: the report's unresolved
    # provider transactions name it beside the pending one, each with its state.
    listed = report["unresolvedProviderTransactions"]["items"]
    assert {(row["transactionId"], row["state"]) for row in listed} == {
        (str(first_row.id), "charged_after_closing"),
        (str(newer.transaction_id), "pending"),
    }

    # The newer attempt never reached the provider: the owner dismisses it, a retry
    # authorized. The hold the first one's approval put is not the owner's to lift with it.
    resolved_at = retry + timedelta(minutes=5)
    dismissed = session.get(PaymentTransaction, newer.transaction_id, populate_existing=True)
    with session_factory() as owner:
        dismiss(owner, sandbox.provider, gym, dismissed, now=resolved_at, retry=True)
        owner.commit()
    session.refresh(subscription)
    assert subscription.collection_paused is True
    assert subscription.collection_hold == attempts.LATE_POSITIVE_EVIDENCE
    busy = collector.catch_up(
        session_factory, sandbox.provider, now=resolved_at, cipher=TEST_CIPHER
    )
    assert (busy.selected, busy.charged, busy.blocked) == (1, 0, 1)
    with session_factory() as operator:
        reconciled = resolution.reconcile(
            operator,
            sandbox.provider,
            TEST_CIPHER,
            organization_id=gym.organization.id,
            transaction_id=first_row.id,
            actor_user_id=None,
            now=resolved_at,
        )
        operator.commit()
    assert reconciled["outcome"] == "late_positive_evidence"
    assert reconciled["state"] == "unresolved"
    settled = collector.recover(
        session_factory, sandbox.provider, now=resolved_at, cipher=TEST_CIPHER
    )
    assert settled.charged == 1
    subscription = session.get(Subscription, subscription.id, populate_existing=True)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.next_charge_date > NOW
    assert (subscription.collection_paused, subscription.collection_hold) == (False, None)
    assert charged_by_the_provider(sandbox, session, subscription) == 1


class Lagging:
    """The sandbox provider whose next `times` lookups answer `outcome` whatever it did (an
    index lagging behind its own answers)."""

    def __init__(self, provider, outcome, times):
        self.provider = provider
        self.outcome = outcome
        self.left = times

    def lookup_charge(self, terminal, unique_id):
        if self.left:
            self.left -= 1
            return ChargeResult(self.outcome, unique_id, response_code=5)
        return self.provider.lookup_charge(terminal, unique_id)

    def __getattr__(self, name):
        return getattr(self.provider, name)


@pytest.mark.embedded
@pytest.mark.parametrize("answer", [Outcome.not_found, Outcome.declined])
def test_a_reopened_attempt_the_provider_then_cannot_find_or_declines_is_a_contradiction(
    session, session_factory, gym, sandbox, answer
):
    """Reopened on the provider's approval of its own id, then a lookup says "not found" (or
    "declined"): closing it again (or opening a debt) would lift the hold and let a retry
    charge the member a second time. It stays pending, held, a contradiction alerted once
    (not at every pass that asks again), the owner cannot dismiss a known success, and it
    settles when a lookup finds the charge."""
    (subscription,) = members_due(session, gym, sandbox, 1)
    provider = RecoveryBeside(sandbox, session_factory, lambda n: NOW + timedelta(minutes=2))
    collector.daily_sweep(
        session_factory, provider, now=NOW, cipher=TEST_CIPHER, monotonic=lambda: 0.0
    )
    later = NOW + timedelta(minutes=10)
    lagging = Lagging(sandbox.provider, answer, times=3)

    passes = [
        collector.recover(session_factory, lagging, now=later, cipher=TEST_CIPHER) for _ in range(2)
    ]

    assert [[a["reason"] for a in p.alerts] for p in passes] == [["billing_contradiction"], []]
    assert [(p.resolved, p.pending) for p in passes] == [(0, 1), (0, 1)]
    (transaction,) = ledger(session, subscription)
    assert transaction.status == TransactionStatus.pending
    field = f"{answer.value}_after_approval"
    assert transaction.billing_attempt["contradiction"]["field"] == field
    session.refresh(subscription)
    assert subscription.collection_hold == attempts.LATE_POSITIVE_EVIDENCE
    assert subscription.status == SubscriptionStatus.active  # no debt opened
    seen = resolution.inspect(session, gym.organization.id, transaction.id, now=later)
    assert seen["actions"]["confirmNoDebit"] is False
    with session_factory() as owner, pytest.raises(DomainError) as refused:
        dismiss(owner, lagging, gym, transaction, now=later)
    # Refused: a known success; or, asked again and declined, the evidence contradicts itself.
    known = "billing_known_success" if answer == Outcome.not_found else "billing_evidence_mismatch"
    assert (refused.value.code, refused.value.status) == (known, 409)
    assert ledger(session, subscription)[0].status == TransactionStatus.pending
    busy = collector.catch_up(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    assert (busy.selected, busy.charged) == (1, 0)
    settled = collector.recover(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    assert settled.charged == 1
    assert charged_by_the_provider(sandbox, session, subscription) == 1


def test_a_charge_begins_at_its_pass_clock_in_steps_of_ten_seconds():
    """Up to ten seconds early: the grace (90 s) less the provider's timeout (30 s) leaves a
    minute; a pass's first ten seconds keep its tick's instant."""
    at = collector.charging_at
    assert [at(NOW, ran) - NOW for ran in (0.0, 9.99, 10.0, 754.3)] == [
        timedelta(0),
        timedelta(0),
        timedelta(seconds=10),
        timedelta(seconds=750),
    ]


@pytest.mark.embedded
def test_a_late_approval_reopened_after_the_newer_attempt_paid_asks_staff_to_refund_one(
    session, session_factory, gym, sandbox
):
    """The first attempt's approval came back while the technical retry was pending, and the
    retry then charged too: the member paid twice. Reopened and settled, the first payment is
    in the ledger, grants nothing more, and its follow-up, filed as "reconcile it", now asks
    staff to refund one of the two payments."""
    (subscription,) = members_due(session, gym, sandbox, 1)
    with session_factory() as first:
        on_its_way = attempts.begin_attempt(first, subscription.id, now=NOW, cipher=TEST_CIPHER)
        first.commit()
    later = NOW + timedelta(minutes=2)
    collector.recover(session_factory, sandbox.provider, now=later, cipher=TEST_CIPHER)
    retry = later + attempts.TECHNICAL_RETRY_DELAYS[0]
    with session_factory() as second:
        newer = attempts.begin_attempt(second, subscription.id, now=retry, cipher=TEST_CIPHER)
        second.commit()
    for began in (on_its_way, newer):  # both reach the provider: both charge
        answer = attempts.send_attempt(began, sandbox.provider)
        with session_factory() as applying:
            attempts.apply_outcome(applying, began.transaction_id, answer, now=retry)
            applying.commit()
    renewed = session.get(Subscription, subscription.id, populate_existing=True)
    period_end = renewed.current_period_end

    with session_factory() as operator:
        resolution.reconcile(
            operator,
            sandbox.provider,
            TEST_CIPHER,
            organization_id=gym.organization.id,
            transaction_id=on_its_way.transaction_id,
            actor_user_id=None,
            now=retry,
        )
        operator.commit()
    collector.recover(session_factory, sandbox.provider, now=retry, cipher=TEST_CIPHER)

    first_row, second_row = ledger(session, subscription)
    assert (first_row.status, second_row.status) == (TransactionStatus.completed,) * 2
    assert first_row.billing_attempt["settlementReview"]["reason"] == attempts.PAID_TWICE
    (task,) = session.scalars(
        select(Task)
        .where(Task.subject_id == str(first_row.id))
        .execution_options(populate_existing=True)
    ).all()
    assert task.title == "The member paid this charge twice: refund one of the two payments"
    assert (task.status, task.data["reason"]) == ("open", attempts.PAID_TWICE)
    subscription = session.get(Subscription, subscription.id, populate_existing=True)
    assert subscription.current_period_end == period_end  # one period for the two payments
    assert (subscription.collection_paused, subscription.collection_hold) == (False, None)
    assert charged_by_the_provider(sandbox, session, subscription) == 2
