"""Protected billing attempts (spec B 1, 2.2, 8): stored before the provider is called, settled
exactly once, and resolved by asking the provider about the stored id, never by charging again.

The three steps run in three transactions:

1. `begin_attempt`: under the subscription's row lock, check the obligation is due and has no
   unresolved attempt, store the attempt (billingAttempt protocol v1) and COMMIT.
2. the provider call, outside any transaction, under the attempt's external id.
3. `apply_outcome`: under the same lock, apply the answer if the attempt is still pending.

A crash after 1 leaves a pending attempt the provider may never have seen; a crash after 2
leaves one it may have charged. Both are resolved by `resolve_attempt`, which asks the provider
about the stored id: approved settles, declined opens debt, not_found is a confirmed
non-charge that may be retried (5, 15, 60 minutes, three times per obligation).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import Select, bindparam, func, select, update
from sqlalchemy.orm import Session, aliased, lazyload

from gymctl import ids
from gymctl.billing import debt, plans
from gymctl.billing.accounts import (
    CARD_PROVIDER,
    active_config,
    billing_settings,
    original_account,
    saved_card,
    terminal_of,
)
from gymctl.billing.alerts import first_of_its_state
from gymctl.bookings import book
from gymctl.bridge import mirror
from gymctl.clock import add_months
from gymctl.crypto import FieldCipher
from gymctl.db import BOOKKEEPING, is_postgres
from gymctl.events import EventKind, emit
from gymctl.models import (
    Booking,
    BookingStatus,
    ClassSession,
    Membership,
    PaymentMethod,
    PaymentTransaction,
    Plan,
    Subscription,
)
from gymctl.models.billing import (
    AttemptKind,
    CollectionMethod,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.models.organizations import MembershipStatus
from gymctl.providers.card import (
    CardProvider,
    ChargeResult,
    Outcome,
    ProviderUnavailable,
    Terminal,
    same_terminal,
)
from gymctl.providers.documents import (
    TAX_INVOICE_AND_RECEIPT,
    DocumentProvider,
    default_document_provider,
    issue_document,
)
from gymctl.retention.overtaken import (
    close_paid_presale,
    end_overtaken_notice,
    notice_follows_paid_period,
)
from gymctl.tasks import close_task, file_task

PROTOCOL = 1
TECHNICAL_RETRY_DELAYS = (timedelta(minutes=5), timedelta(minutes=15), timedelta(minutes=60))
EXECUTING_GRACE = timedelta(seconds=90)  # spec B 8: an attempt this young may still be running
# An attempt the provider could not be asked about for this long (its lookups refused or
# unanswered: the account's API access revoked, an outage) is told to an operator, once: the
# card may have been charged, and recovery alone cannot tell.
UNANSWERED_ALERT_AFTER = timedelta(hours=1)
UNANSWERED = "attempt_unanswered"
# The merchant account that sent an attempt is gone: only an operator can resolve it.
ACCOUNT_GONE = "original_account_unavailable"
PRESALE_CARD_AGE = timedelta(minutes=45)  # spec B 8: card saved 45 min after terminal_since
LATE_POSITIVE_EVIDENCE = "late_positive_evidence"  # a collection hold: see release_hold
NOT_CHARGED = "not_charged"  # billing_resolution.decision: the provider never charged it
REOPENED = "reopened_by_late_evidence"  # the decision of one closed so but charged after all
# ...while a newer attempt held the subscription: not reopened yet (one pending attempt at a
# time); an operator's reconcile reopens it once the newer one is resolved.
CHARGED_AFTER_CLOSING = "charged_after_closing"
# The decisions of failed attempts that were no decline: the provider never received one (a
# technical non-charge), or it charged after all.
NOT_DECLINES = (NOT_CHARGED, CHARGED_AFTER_CLOSING)
DEBT_RETRY_INTERVAL = timedelta(days=1)  # ours: a debt is retried daily until paid or cancelled
FOLLOW_UP = "payment_follow_up"  # the staff task kind of a payment to look at
FOLLOW_UP_DUE = timedelta(days=1)
SETTLED = (
    TransactionStatus.completed,
    TransactionStatus.refund_pending,
    TransactionStatus.refunded,
)
COLLECTABLE = (
    SubscriptionStatus.scheduled,
    SubscriptionStatus.active,
    SubscriptionStatus.past_due,
    SubscriptionStatus.debt,
)


class BeganOutcome(StrEnum):
    started = "started"
    busy = "busy"  # locked by another worker, or an attempt is unresolved
    blocked = "blocked"
    skipped = "skipped"  # not due


class AppliedOutcome(StrEnum):
    charged = "charged"
    declined = "declined"
    pending = "pending"
    already_resolved = "already_resolved"
    contradiction = "contradiction"
    not_charged = "not_charged"
    late_positive_evidence = "late_positive_evidence"  # closed as not charged, charged after all


@dataclass(frozen=True)
class Began:
    """The outcome of step 1: an attempt to send, or why nothing was started."""

    outcome: BeganOutcome
    reason: str | None = None
    transaction_id: uuid.UUID | None = None
    terminal: Terminal | None = None
    token: Any = None  # SavedCard; never logged
    alert: str | None = None
    attempt: dict[str, Any] | None = None  # the billingAttempt stored and committed


@dataclass(frozen=True)
class Applied:
    outcome: AppliedOutcome
    transaction_id: uuid.UUID
    alert: str | None = None


def lock_subscription(
    session: Session,
    subscription_id: uuid.UUID,
    *,
    skip_locked: bool = False,
    may_end_at: datetime | None = None,
) -> Subscription | None:
    """Locks in the fixed order organization, membership, subscription (spec B 4.1): the
    membership row first, then the subscription. None when another worker holds it. On the
    embedded default the transaction already holds the database's one write lock (BEGIN
    IMMEDIATE, gymctl.db): there are no row locks to order, so the subscription is only read.

    `may_end_at` (now), for a path that may end the plan (a settlement superseding it, a
    matured notice): the seats it gives up then lock the members waiting in their classes
    (shared, after this membership), so those whose ids come first are taken first, shared
    and in id order, as a removal takes every membership its seats touch
    (access.leaving.lock_leaving): one id order. Taken after their own, a charge ending A's
    plan and B's removal, each waiting in a class where the other holds a seat, deadlocked.
    It waits for them even with skip_locked: skipped, they would be locked after its own."""
    membership_of, lock_membership, lock = _LOCKS[skip_locked]
    if not is_postgres(session):
        return session.scalar(lock, {"id": subscription_id})
    membership_id = session.scalar(membership_of, {"id": subscription_id})
    if membership_id is None:
        return None
    if may_end_at is not None:
        session.scalars(_LOCK_WAITING_FIRST, {"id": membership_id, "now": may_end_at}).all()
    if session.scalar(lock_membership, {"id": membership_id}) is None:
        return None
    return session.scalar(lock, {"id": subscription_id})


# lock_subscription's statements, built once (every charge takes them twice), by skip_locked.
_LOCKS = {
    skip_locked: (
        select(Subscription.membership_id).where(Subscription.id == bindparam("id")),
        select(Membership.id)
        .where(Membership.id == bindparam("id"))
        .with_for_update(skip_locked=skip_locked),
        select(Subscription)
        .where(Subscription.id == bindparam("id"))
        .with_for_update(skip_locked=skip_locked)
        .execution_options(populate_existing=True),
    )
    for skip_locked in (False, True)
}


def waiting_in_classes_of(holders: Any, now: Any) -> Select:
    """The members waiting in the classes to come that `holders` (one membership id, or a
    select of them) hold seats in: a seat given up there may promote them, so every path that
    may give those seats up (a plan ending, a member leaving, the lifecycle pass) locks them,
    shared, in the one id order it takes its own membership in."""
    seat = aliased(Booking)
    held = (
        seat.membership_id.in_(holders)
        if isinstance(holders, Select)
        else seat.membership_id == holders
    )
    return (
        select(Booking.membership_id)
        .join(seat, seat.class_session_id == Booking.class_session_id)
        .join(ClassSession, ClassSession.id == seat.class_session_id)
        .where(
            held,
            seat.status.in_(book.ACTIVE),
            seat.deleted_at.is_(None),
            ClassSession.starts_at > now,
            Booking.status == BookingStatus.waitlisted,
            Booking.deleted_at.is_(None),
        )
    )


# The members waiting in the membership's classes whose ids come before its own, in id order:
# what lock_subscription takes (shared) before the membership when the plan may end.
_LOCK_WAITING_FIRST = (
    select(Membership.id)
    .where(
        Membership.id.in_(waiting_in_classes_of(bindparam("id"), bindparam("now"))),
        Membership.id < bindparam("id"),
    )
    .order_by(Membership.id)
    .with_for_update(read=True)
)


def is_due(subscription: Subscription, now: datetime) -> bool:
    if subscription.deleted_at is not None or subscription.status not in COLLECTABLE:
        return False
    if subscription.payment_collection_method != CollectionMethod.card_provider:
        return False
    if subscription.next_charge_date is None or subscription.next_charge_date > now:
        return False
    if (
        subscription.cancel_at_period_end
        and subscription.status != SubscriptionStatus.debt
        and subscription.cancellation_effective_at is not None
        and (
            subscription.cancellation_effective_at <= subscription.next_charge_date
            or (
                subscription.current_period_end is not None
                and subscription.cancellation_effective_at <= subscription.current_period_end
            )
            or subscription.cancellation_effective_at <= now
        )
    ):
        return False  # see ends_before_renewal
    return subscription.retry_at is None or subscription.retry_at <= now


def ends_before_renewal(at: Any) -> Any:
    """The SQL side of `is_due`'s notice rule, at the instant `at` of the charge (a bound
    `now`, or the column naming the instant a plan would come due): a notice that takes effect
    on or before the renewal ends the plan first (the period-end sweep ends it), so the renewal
    is never collected; a debt is still collected. The renewal pays for the period that starts
    at the current one's end (grant_period): a charge date moved before that end does not make
    a notice effective by then any less first (staff moved one, and the member paid a month
    after their notice, less a prorated refund). Nor does a charge collected late (a technical
    retry, collection resumed by the owner): a notice in effect by the instant of the charge,
    given after its date, ends the plan before it (the member cancelled before being charged
    for a period the retry would have paid, and renewal_paid then moved the notice past it)."""
    effective = Subscription.cancellation_effective_at
    return (
        Subscription.cancel_at_period_end.is_(True)
        & (Subscription.status != SubscriptionStatus.debt)
        & effective.is_not(None)
        & (
            (effective <= Subscription.next_charge_date)
            | (effective <= Subscription.current_period_end)
            | (effective <= at)
        )
    )


def audit(
    session: Session,
    action: str,
    transaction: PaymentTransaction,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    **payload: Any,
) -> None:
    """An audit row of a payment transaction (its subscription and status in the payload)."""
    emit(
        session,
        EventKind.audit,
        action,
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=transaction.id,
        organization_id=transaction.organization_id,
        actor_user_id=actor_user_id,
        payload={
            "subscriptionId": str(transaction.subscription_id),
            "status": transaction.status.value,
            **payload,
        },
    )


def held_reason(subscription: Subscription) -> str:
    """Why collection of a paused subscription is held: the system's hold names its cause
    (`collection_held:<hold>`, like settlement_review:<reason>), else it is the owner's."""
    if subscription.collection_hold:
        return f"collection_held:{subscription.collection_hold}"
    return "collection_paused_by_owner"


def release_hold(
    session: Session, transaction: PaymentTransaction, subscription: Subscription, *, now: datetime
) -> None:
    """The attempt late positive evidence reopened is resolved (settled, declined or confirmed
    never received): its outcome is known, so the hold it put is lifted, back to the owner's
    own pause as it stood when the attempt was dismissed, and its "reconcile it" follow-up is
    done (one a settlement refiled for a review asks something else: it stays open)."""
    resolution = dict(transaction.billing_resolution or {})
    if transaction.status == TransactionStatus.pending or not resolution.get("lateEvidenceAt"):
        return
    close_task(
        session,
        organization_id=transaction.organization_id,
        kind=FOLLOW_UP,
        subject_type="payment_transaction",
        subject_id=str(transaction.id),
        reason=LATE_POSITIVE_EVIDENCE,
        because=f"payment_{transaction.status.value}",
        now=now,
    )
    if subscription.collection_hold != LATE_POSITIVE_EVIDENCE:
        return
    subscription.collection_paused = bool(resolution.get("ownerPaused"))
    subscription.collection_hold = None
    subscription.billing_alert = None
    subscription.updated_at = now
    resolution["holdReleasedAt"] = now.isoformat()
    transaction.billing_resolution = resolution
    audit(
        session,
        "billing.collection_released",
        transaction,
        None,
        now,
        hold=LATE_POSITIVE_EVIDENCE,
        ownerPaused=subscription.collection_paused,
    )


def ended_with_debt(subscription: Subscription) -> bool:
    """A plan that ended (cancelled for non-payment) with its debt still open: only a debt
    attempt the member asks for collects it; no pass selects it."""
    return subscription.status not in COLLECTABLE and debt.owes(subscription)


def kind_of(subscription: Subscription) -> AttemptKind:
    if subscription.status == SubscriptionStatus.debt:
        return AttemptKind.debt
    return AttemptKind.recurring


def obligation_of(subscription: Subscription, kind: AttemptKind) -> str:
    """The charge an attempt collects: a renewal by its due date, a debt by its day 0."""
    if kind == AttemptKind.debt and subscription.debt_since is not None:
        return f"{subscription.id}:debt:{subscription.debt_since.isoformat()}"
    due = subscription.next_charge_date.isoformat() if subscription.next_charge_date else "now"
    return f"{subscription.id}:{kind.value}:{due}"


def amount_of(subscription: Subscription, kind: AttemptKind) -> int:
    if kind == AttemptKind.debt and subscription.debt_amount_in_cents:
        return subscription.debt_amount_in_cents
    return subscription.price_in_cents


def _confirmed_non_charges(obligation: Any) -> tuple:
    """Attempts of an obligation the provider confirmed it never charged (technical failures)."""
    return (
        PaymentTransaction.obligation_key == obligation,
        PaymentTransaction.status == TransactionStatus.failed,
        PaymentTransaction.billing_resolution["decision"].as_string() == NOT_CHARGED,
    )


# The statements every charge runs, built once (building them cost more than SQLite running them).
_TECHNICAL_FAILURES = (
    select(func.count())
    .select_from(PaymentTransaction)
    .where(*_confirmed_non_charges(bindparam("obligation")))
)


def technical_failures(session: Session, obligation: str) -> int:
    return session.scalar(_TECHNICAL_FAILURES, {"obligation": obligation})


def same_terms(
    terms: tuple[int, str, str], amount: int, currency: str, terminal: str | None
) -> bool:
    """A technical retry's terms (amount, currency, terminal) are those of the non-charge it
    follows."""
    return terms[:2] == (amount, currency) and same_terminal(terms[2], terminal)


def _last_non_charge(session: Session, obligation: str) -> tuple[tuple[int, str, str], bool]:
    """The terms (amount, currency, terminal) of the last confirmed non-charge of an
    obligation, and whether the owner authorized a retry of it."""
    attempt, resolution = session.execute(
        select(PaymentTransaction.billing_attempt, PaymentTransaction.billing_resolution)
        .where(*_confirmed_non_charges(obligation))
        .order_by(PaymentTransaction.created_at.desc())
        .limit(1)
    ).one()
    terms = (attempt["amountInCents"], attempt["currency"], attempt["terminal"])
    return terms, bool(resolution.get("retryAuthorized"))


def decides_retry(session: Session, transaction: PaymentTransaction) -> bool:
    """The technical non-charge whose retry authorization the next attempt of its kind reads
    (`begin_attempt`'s `_last_non_charge`): the last confirmed non-charge of the charge that
    kind would collect now (the collector's renewal or debt, the member's pay-debt of an ended
    plan, the owner's manual charge). Authorizing an older one, or one of a charge since paid
    or moved, lets nothing through."""
    subscription = session.get(Subscription, transaction.subscription_id)
    if subscription is None or transaction.attempt_kind is None:
        return False
    owed = obligation_of(subscription, transaction.attempt_kind)
    if transaction.obligation_key != owed:
        return False
    last = session.scalar(
        select(PaymentTransaction.id)
        .where(*_confirmed_non_charges(owed))
        .order_by(PaymentTransaction.created_at.desc())
        .limit(1)
    )
    return last == transaction.id


_UNRESOLVED_ATTEMPT = select(PaymentTransaction).where(
    PaymentTransaction.subscription_id == bindparam("id"),
    PaymentTransaction.status == TransactionStatus.pending,
    PaymentTransaction.attempt_kind.is_not(None),
)


def unresolved_attempt(session: Session, subscription_id: uuid.UUID) -> PaymentTransaction | None:
    return session.scalar(_UNRESOLVED_ATTEMPT, {"id": subscription_id})


# begin_attempt's two questions of the ledger, asked together (every charge asks both): is an
# attempt of the subscription unresolved, and how many confirmed non-charges has the obligation.
_LEDGER_CHECKS = select(
    _UNRESOLVED_ATTEMPT.with_only_columns(PaymentTransaction.id).exists(),
    _TECHNICAL_FAILURES.scalar_subquery(),
)


def ledger_checks(
    session: Session, subscription_id: uuid.UUID, obligation: str
) -> tuple[bool, int]:
    """(an unresolved attempt exists, the obligation's technical failures), one statement."""
    unresolved, failures = session.execute(
        _LEDGER_CHECKS, {"id": subscription_id, "obligation": obligation}
    ).one()
    return bool(unresolved), failures


def due_ledger_checks(session: Session, subscription: Subscription) -> tuple[bool, int]:
    """ledger_checks of the charge now due: what a move of its date waits for. Technical
    retries count per obligation, which the date names (spec B 8: at most three): a date moved
    past confirmed non-charges made a new obligation, its count back at none."""
    obligation = obligation_of(subscription, kind_of(subscription))
    return ledger_checks(session, subscription.id, obligation)


def begin_attempt(
    session: Session,
    subscription_id: uuid.UUID,
    *,
    now: datetime,
    cipher: FieldCipher,
    kind: AttemptKind | None = None,
    skip_locked: bool = True,
) -> Began:
    """Step 1. The caller commits the session when the outcome is `started`, before calling
    the provider; any other outcome wrote nothing."""
    subscription = lock_subscription(session, subscription_id, skip_locked=skip_locked)
    if subscription is None:
        return Began(BeganOutcome.busy, "locked")
    if not (
        is_due(subscription, now)
        or kind == AttemptKind.manual
        or (kind == AttemptKind.debt and ended_with_debt(subscription))
    ):
        return Began(BeganOutcome.skipped, "not_due")
    kind = kind or kind_of(subscription)
    obligation = obligation_of(subscription, kind)
    unresolved, failures = ledger_checks(session, subscription.id, obligation)
    if unresolved:
        return Began(BeganOutcome.busy, "unresolved_attempt")
    if subscription.collection_paused:
        reason = held_reason(subscription)
        return Began(BeganOutcome.blocked, reason, alert=reason)
    config = active_config(session, subscription.organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        return Began(BeganOutcome.blocked, "no_card_provider_terminal")
    method = (
        session.get(PaymentMethod, subscription.payment_method_id)
        if subscription.payment_method_id
        else None
    )
    if method is None or method.deleted_at is not None:
        return Began(BeganOutcome.blocked, "no_saved_card")
    card = saved_card(method, cipher)
    if subscription.status == SubscriptionStatus.scheduled and (
        config.terminal_since is not None
        and method.saved_at < config.terminal_since + PRESALE_CARD_AGE
        and not card.verified_on(config.terminal)
    ):
        # spec B 8: only a card saved 45 minutes after the terminal went live is on it, or
        # one verify-account proved there.
        return Began(BeganOutcome.blocked, "card_predates_terminal")
    amount = amount_of(subscription, kind)
    if failures:
        terms, authorized = _last_non_charge(session, obligation)
        # An owner's authorize-retry on the last non-charge allows exactly one more attempt.
        if failures > len(TECHNICAL_RETRY_DELAYS) and not authorized:
            return Began(
                BeganOutcome.blocked,
                "technical_retries_exhausted",
                alert="technical_retries_exhausted",
            )
        if not same_terms(terms, amount, subscription.currency, config.terminal) and not authorized:
            # A technical retry repeats the confirmed non-charge it follows; other terms (a
            # new price, currency or terminal since) are a new charge an owner must allow.
            return Began(BeganOutcome.blocked, "retry_terms_changed", alert="retry_terms_changed")
    external_id = str(ids.new_id())
    transaction = PaymentTransaction(
        id=ids.new_id(),
        organization_id=subscription.organization_id,
        subscription_id=subscription.id,
        user_id=subscription.user_id,
        type=TransactionType.recurring,
        status=TransactionStatus.pending,
        provider=CARD_PROVIDER,
        method="card",
        amount_in_cents=amount,
        currency=subscription.currency,
        attempt_kind=kind,
        obligation_key=obligation,
        billing_attempt={
            "protocol": PROTOCOL,
            "externalAttemptId": external_id,
            "terminal": config.terminal,
            "amountInCents": amount,
            "currency": subscription.currency,
            "idempotencyKey": external_id,
            "technicalRetry": failures,
            "startedAt": now.isoformat(),
            "snapshot": _snapshot(subscription),
        },
        created_at=now,
        updated_at=now,
    )
    session.add(transaction)
    subscription.billing_alert = None  # collecting again: the next block is a new state
    try:
        with unique_violation("uq_payment_transactions_one_pending_attempt"):
            session.flush()
    except UniqueViolation:
        # Another collector stored its attempt between our check and our insert.
        session.rollback()
        return Began(BeganOutcome.busy, "unresolved_attempt")
    return Began(
        BeganOutcome.started,
        transaction_id=transaction.id,
        terminal=terminal_of(config, cipher),
        token=card,
        attempt=transaction.billing_attempt,
    )


def send_attempt(began: Began, provider: CardProvider) -> ChargeResult:
    """Step 2: the provider call for a committed attempt (no transaction is held), with the
    terms step 1 stored."""
    attempt = began.attempt
    return provider.charge_token(
        began.terminal,
        token=began.token.token,
        expiry=began.token.expiry,
        amount_in_cents=attempt["amountInCents"],
        currency=attempt["currency"],
        unique_id=attempt["externalAttemptId"],
    )


def apply_outcome(
    session: Session, transaction_id: uuid.UUID, result: ChargeResult, *, now: datetime
) -> Applied:
    """Step 3: apply the provider's answer once; the caller commits. PostgreSQL locks the
    subscription before the transaction (the fixed order); the embedded default holds its one
    write lock already, so it reads the transaction first and the subscription it names."""
    if is_postgres(session):
        subscription = lock_subscription(
            session,
            session.scalar(_SUBSCRIPTION_OF, {"id": transaction_id}),
            may_end_at=now,  # a settlement may supersede the plan (end_superseded)
        )
        transaction = session.scalar(_LOCK_TRANSACTION, {"id": transaction_id})
    else:
        transaction = session.scalar(_LOCK_TRANSACTION, {"id": transaction_id})
        subscription = lock_subscription(session, transaction.subscription_id)
    if transaction.status != TransactionStatus.pending:
        if result.outcome == Outcome.approved and reopenable(transaction):
            alert = late_positive_evidence(session, transaction, subscription, result, now=now)
            return Applied(AppliedOutcome.late_positive_evidence, transaction.id, alert=alert)
        return Applied(AppliedOutcome.already_resolved, transaction.id)
    applied = _apply(session, transaction, subscription, result, now=now)
    release_hold(session, transaction, subscription, now=now)
    return applied


_SUBSCRIPTION_OF = select(PaymentTransaction.subscription_id).where(
    PaymentTransaction.id == bindparam("id")
)
_LOCK_TRANSACTION = (
    select(PaymentTransaction)
    .where(PaymentTransaction.id == bindparam("id"))
    .with_for_update()
    .execution_options(populate_existing=True)
)


def _apply(
    session: Session,
    transaction: PaymentTransaction,
    subscription: Subscription,
    result: ChargeResult,
    *,
    now: datetime,
) -> Applied:
    attempt = dict(transaction.billing_attempt)
    if result.outcome == Outcome.approved:
        mismatch = evidence_mismatch(attempt, result)
        if mismatch:
            return _contradicted(transaction, attempt, mismatch, now)
        settle(session, transaction, subscription, result.transaction_id, now=now)
        review = transaction.billing_attempt.get("settlementReview")
        alert = f"settlement_review:{review['reason']}" if review else None
        return Applied(AppliedOutcome.charged, transaction.id, alert=alert)
    if result.outcome in (Outcome.declined, Outcome.not_found) and approved_late(transaction):
        # Reopened on the provider's approval of this very id: a lookup that now declines it or
        # cannot find it contradicts that. Applied, it would open a debt or close it as not
        # charged, lift the hold, and let a retry charge the member a second time.
        return _contradicted(transaction, attempt, f"{result.outcome.value}_after_approval", now)
    if result.outcome == Outcome.declined:
        decline(session, transaction, subscription, result, now=now)
        return Applied(AppliedOutcome.declined, transaction.id)
    if result.outcome == Outcome.not_found:
        return _not_charged(session, transaction, subscription, now=now)
    attempt["uncertainSince"] = attempt.get("uncertainSince") or now.isoformat()
    _save_attempt(transaction, attempt, now)
    return Applied(AppliedOutcome.pending, transaction.id)


def with_late_evidence(
    resolution: dict[str, Any], result: ChargeResult, now: datetime
) -> dict[str, Any]:
    """A resolution with the provider's late answer on it, as `approved_late` reads it (the
    collector's attempts and the desk's charges alike)."""
    return {
        **resolution,
        "lateEvidenceAt": now.isoformat(),
        "lateEvidence": {
            "answer": result.outcome.value,
            "providerTransactionId": result.transaction_id,
        },
    }


def approved_late(transaction: PaymentTransaction) -> bool:
    """Reopened (or held) on the provider's approval of this attempt's own id."""
    late = (transaction.billing_resolution or {}).get("lateEvidence") or {}
    return late.get("answer") == Outcome.approved.value


def _contradicted(
    transaction: PaymentTransaction, attempt: dict[str, Any], field: str, now: datetime
) -> Applied:
    alert = record_contradiction(transaction, attempt, field, now)
    return Applied(AppliedOutcome.contradiction, transaction.id, alert=alert)


def record_contradiction(
    transaction: PaymentTransaction, attempt: dict[str, Any], field: str, now: datetime
) -> str | None:
    """Keep a charge the provider contradicts pending, with the field (a collector attempt or a
    desk charge). The alert to raise when first recorded; None for the same one seen again, so
    recovery, asking every five minutes, does not page every time."""
    prior = attempt.get("contradiction")
    if isinstance(prior, dict) and prior.get("field") == field:
        return None
    # A desk charge's from before s49 is its timestamp alone: recorded, never alerted.
    at = prior if isinstance(prior, str) else now.isoformat()
    attempt["contradiction"] = {"field": field, "at": at}
    _save_attempt(transaction, attempt, now)
    return "billing_contradiction"


def reopenable(transaction: PaymentTransaction) -> bool:
    """Closed as never charged (a technical non-charge, failed; a dismissal, cancelled), or
    found charged after that while a newer attempt held the subscription: positive evidence
    reopens it."""
    return transaction.status in (TransactionStatus.failed, TransactionStatus.cancelled) and (
        transaction.billing_resolution or {}
    ).get("decision") in (NOT_CHARGED, CHARGED_AFTER_CLOSING)


def late_positive_evidence(
    session: Session,
    transaction: PaymentTransaction,
    subscription: Subscription,
    result: ChargeResult,
    *,
    now: datetime,
) -> str:
    """An attempt closed as not charged turns out charged (an operator's reconcile, or the
    provider's answer to the charge itself arriving after a lookup said "not found"): back to
    pending when no newer attempt holds the subscription (recovery then settles it by its
    stored id), collection held, an audit row and an urgent follow-up. Never dropped: the
    member's money is with the gym and the ledger must say so. The alert, for the caller."""
    resolution = dict(transaction.billing_resolution or {})
    # A dismissal recorded the owner's own pause; a technical non-charge records it now.
    resolution.setdefault(
        "ownerPaused", subscription.collection_paused and not subscription.collection_hold
    )
    resolution = with_late_evidence(resolution, result, now)
    newer = unresolved_attempt(session, subscription.id)
    # No longer a non-charge either way (no technical failure to count, no retry to authorize).
    if newer is None:
        transaction.status = TransactionStatus.pending  # its outcome is the provider's again
        resolution["decision"] = REOPENED
    else:
        resolution["decision"] = CHARGED_AFTER_CLOSING
    transaction.billing_resolution = resolution
    transaction.updated_at = now
    subscription.collection_paused = True
    subscription.collection_hold = LATE_POSITIVE_EVIDENCE
    held = held_reason(subscription)
    subscription.billing_alert = held  # raised by the caller: the collector does not again
    subscription.updated_at = now
    session.flush()
    follow_up(
        session,
        transaction,
        subscription,
        reason=LATE_POSITIVE_EVIDENCE,
        title="A payment closed as not charged was charged after all: reconcile it",
        now=now,
    )
    audit(
        session,
        "billing.late_positive_evidence",
        transaction,
        None,
        now,
        movedToPending=newer is None,
    )
    return held


# The order a recovery pass asks the provider in (collector, desk charges, stored refunds):
# the rows never asked first, then those asked longest ago (`asked_at`, `mark_asked`), then the
# oldest. Ordered by updated_at alone, rows pending for good (a contradiction waiting for
# staff, lookups the provider refuses) kept the first places of every batch, and a row left
# pending after a batch of them was never asked about.
ASKING_ORDER = (
    PaymentTransaction.asked_at.nulls_first(),
    PaymentTransaction.updated_at,
    PaymentTransaction.id,
)


def mark_asked(session: Session, transaction_id: uuid.UUID, now: datetime) -> None:
    """Asked and still unresolved: behind the rows not asked since (ASKING_ORDER). The caller
    commits. Bookkeeping (db.BOOKKEEPING): it changes what no sweep decides."""
    session.execute(
        update(PaymentTransaction)
        .where(PaymentTransaction.id == transaction_id)
        .values(asked_at=now)
        .execution_options(synchronize_session=False, **BOOKKEEPING)
    )


def executing_until(attempt: dict[str, Any]) -> datetime | None:
    """When a stored attempt's 90 s executing grace ends; None when its start is unknown
    (resolve_attempt then leaves it to an operator)."""
    started = attempt.get("startedAt")
    return datetime.fromisoformat(started) + EXECUTING_GRACE if started else None


def resolve_attempt(
    session: Session,
    transaction_id: uuid.UUID,
    provider: CardProvider,
    *,
    now: datetime,
    cipher: FieldCipher,
) -> Applied:
    """Ask the provider about a pending attempt's stored id (no charge) and apply the answer.
    An attempt inside the 90 s executing grace is left alone: it may still be on its way."""
    transaction = session.get(PaymentTransaction, transaction_id)
    if transaction is None or transaction.status != TransactionStatus.pending:
        return Applied(AppliedOutcome.already_resolved, transaction_id)
    attempt = transaction.billing_attempt or {}
    until = executing_until(attempt)
    if until is None or now < until:
        return Applied(AppliedOutcome.pending, transaction.id)
    # The account that sent it, also one the gym replaced since (its credentials are kept):
    # asked on the new terminal's alone, a charge taken on the old one before a crash was
    # never settled, and its member never had the period they paid for.
    config = original_account(session, transaction.organization_id, attempt.get("terminal"))
    if config is None:
        # The original merchant account is gone: only an operator can resolve this one. Told
        # once, not at every pass (the caller commits the mark on its plan; one with no plan
        # left, whose row was deleted, has nowhere to keep it and is told each pass).
        told = transaction.subscription_id is not None and not first_of_its_state(
            session, transaction.subscription_id, ACCOUNT_GONE
        )
        return Applied(AppliedOutcome.pending, transaction.id, alert=None if told else ACCOUNT_GONE)
    # Read before the rollback: it expires the config, and reading it again would begin a
    # transaction (on the embedded default, the write lock) held across the provider call.
    on_terminal = terminal_of(config, cipher)
    subscription_id = transaction.subscription_id
    session.rollback()  # no transaction is held across the provider call
    try:
        result = provider.lookup_charge(on_terminal, attempt["externalAttemptId"])
    except ProviderUnavailable:  # ProviderRefused included: nothing known
        return Applied(
            AppliedOutcome.pending,
            transaction_id,
            alert=_unanswered(session, attempt, subscription_id, now),
        )
    return apply_outcome(session, transaction_id, result, now=now)


def unanswered_too_long(attempt: dict[str, Any], now: datetime) -> bool:
    """The attempt's lookups have gone unanswered for UNANSWERED_ALERT_AFTER past its grace:
    an operator is to be told (the collector's attempts, and the desk's charges)."""
    until = executing_until(attempt)
    return until is not None and now - until >= UNANSWERED_ALERT_AFTER


def _unanswered(
    session: Session, attempt: dict[str, Any], subscription_id: uuid.UUID | None, now: datetime
) -> str | None:
    """attempt_unanswered once the attempt's lookups have gone unanswered for
    UNANSWERED_ALERT_AFTER past its grace, the first time for its subscription (the caller
    commits the mark): it stayed pending for good, the period never granted nor anyone told."""
    if not unanswered_too_long(attempt, now):
        return None
    if subscription_id is None:  # no plan left to keep the mark on: told each pass
        return UNANSWERED
    return UNANSWERED if first_of_its_state(session, subscription_id, UNANSWERED) else None


def settle(
    session: Session,
    transaction: PaymentTransaction,
    subscription: Subscription,
    provider_transaction_id: str | None,
    *,
    now: datetime,
) -> None:
    """A verified success: the ledger settles, and the membership and subscription are
    granted their period in the same transaction. Drift since the attempt began never holds
    back the ledger: it records settlementReview and files an urgent follow-up instead.
    The money taken gets its tax invoice and receipt as a desk sale's does (money received,
    whatever the review says), numbered last: the document counter is the last lock taken."""
    attempt = dict(transaction.billing_attempt)
    owed = debt.owes(subscription)
    review = settlement_review(session, transaction, subscription)
    done = ["ledger"]
    granted = False  # a period granted: not for a debt paid on a plan that stays ended
    if review:
        attempt["settlementReview"] = {"reason": review, "at": now.isoformat()}
        follow_up(
            session,
            transaction,
            subscription,
            reason=review,
            title=(
                "The member paid this charge twice: refund one of the two payments"
                if review == PAID_TWICE
                else f"Payment settled but not granted ({review}): review the subscription"
            ),
            now=now,
        )
    elif ended_with_debt(subscription):
        # The debt of an ended plan is paid; the plan stays ended (nothing to grant).
        debt.restore_from_debt(subscription, now=now)
        done += ["subscription", "membership"]
    elif (holder := held_again_by(session, subscription)) is not None:
        end_superseded(session, subscription, holder, now=now)  # paid, not revived
        done += ["subscription", "membership"]  # the membership stays with the holder
    else:
        grant_period(session, subscription, now=now)
        if transaction.attempt_kind != AttemptKind.debt and notice_follows_paid_period(
            session,
            subscription,
            transaction_id=transaction.id,
            attempt_started=transaction.created_at,
            now=now,
        ):
            # A notice given while this renewal was in flight read the period before it: it
            # ends the period paid (a debt paid keeps s41's rule: a notice in debt ends now).
            mirror.subscription_changed(session, subscription, now=now)
        done += ["subscription", "membership"]
        granted = True
    # The ledger row settles with its effects, in one write (all in this one transaction).
    transaction.status = TransactionStatus.completed
    transaction.provider_transaction_id = provider_transaction_id
    transaction.billing_attempt = attempt
    transaction.effects = {"done": done, "at": now.isoformat()}
    transaction.updated_at = now
    emit(
        session,
        EventKind.domain,
        "subscription.renewed",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        payload={
            "transactionId": str(transaction.id),
            "amountInCents": transaction.amount_in_cents,
            "currency": transaction.currency,
            "kind": transaction.attempt_kind.value if transaction.attempt_kind else None,
            "granted": granted,
        },
    )
    if owed and not debt.owes(subscription):
        book.promote_where_waiting(
            session, subscription.organization_id, subscription.membership_id, now=now
        )
    document_sale(session, transaction, now=now)


def document_sale(
    session: Session,
    transaction: PaymentTransaction,
    *,
    now: datetime,
    documents: DocumentProvider | None = None,
) -> None:
    """A card payment the provider took (a renewal, an opening-day charge, a debt retry, a
    hosted page's charge, a contradiction settled): its TaxInvoiceAndReceipt, once. A refund
    of it is then a TaxInvoiceAndReceiptRefund naming its number (refunds._document). The
    collector's doors carry no document provider: theirs is the default one."""
    if transaction.document_number is None:
        documents = documents or default_document_provider()
        issue_document(session, documents, transaction, TAX_INVOICE_AND_RECEIPT, now=now)


PAID_TWICE = "paid_twice"


def settlement_review(
    session: Session, transaction: PaymentTransaction, subscription: Subscription
) -> str | None:
    """Why the attempt's outcome may no longer apply to its obligation as it stands: paid
    twice, or the obligation drifted since the attempt began (debt_changed,
    retry_date_changed); None when it applies."""
    return _paid_twice(session, transaction) or _drift(transaction, subscription)


def _paid_twice(session: Session, transaction: PaymentTransaction) -> str | None:
    """A reopened attempt (charged after it was closed as not charged) whose obligation another
    payment has settled since: the member paid twice, and staff refund one. Only a reopened
    attempt can find one (an obligation has one pending attempt at a time, and a settled one
    is not due again), so only it asks."""
    if not (transaction.billing_resolution or {}).get("lateEvidenceAt"):
        return None
    other = session.scalar(
        select(PaymentTransaction.id).where(
            PaymentTransaction.obligation_key == transaction.obligation_key,
            PaymentTransaction.id != transaction.id,
            PaymentTransaction.status.in_(SETTLED),
        )
    )
    return PAID_TWICE if other is not None else None


def follow_up(
    session: Session,
    transaction: PaymentTransaction,
    subscription: Subscription,
    *,
    reason: str,
    title: str,
    now: datetime,
) -> None:
    """An urgent payment_follow_up task on the transaction, due within FOLLOW_UP_DUE."""
    file_task(
        session,
        organization_id=transaction.organization_id,
        kind=FOLLOW_UP,
        subject_type="payment_transaction",
        subject_id=str(transaction.id),
        title=title,
        priority="urgent",
        due_at=now + FOLLOW_UP_DUE,
        now=now,
        data={"reason": reason, "subscriptionId": str(subscription.id)},
        linked_user_id=subscription.user_id,
    )


def decline(
    session: Session,
    transaction: PaymentTransaction,
    subscription: Subscription,
    result: ChargeResult,
    *,
    now: datetime,
) -> None:
    """A decline opens debt (day 0 = the decline), a presale's too even with no active
    owner; a debt retry's decline keeps the debt and its day 0."""
    transaction.status = TransactionStatus.failed
    transaction.provider_transaction_id = result.transaction_id
    transaction.metadata_ = {**transaction.metadata_, "responseCode": result.response_code}
    transaction.updated_at = now
    subscription.decline_count += 1
    presale = subscription.status == SubscriptionStatus.scheduled
    leave_unpaid(session, subscription, amount_in_cents=transaction.amount_in_cents, now=now)
    emit(
        session,
        EventKind.domain,
        "payment.charge_failed",
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=transaction.id,
        organization_id=transaction.organization_id,
        payload={
            "subscriptionId": str(subscription.id),
            "amountInCents": transaction.amount_in_cents,
            "currency": transaction.currency,
            "declineCount": subscription.decline_count,
            "presale": presale,
        },
    )


def leave_unpaid(
    session: Session, subscription: Subscription, *, amount_in_cents: int, now: datetime
) -> None:
    """An obligation a charge did not pay, left as a decline leaves it: debt opened (day 0 =
    now; a debt keeps its own), retried daily, a presale's case kind set."""
    presale = subscription.status == SubscriptionStatus.scheduled
    if subscription.status in COLLECTABLE and subscription.status != SubscriptionStatus.debt:
        debt.open_debt(
            session,
            subscription,
            amount_in_cents=amount_in_cents,
            reason=debt.CHARGE_FAILED,
            since=now,
            now=now,
        )
    subscription.retry_at = now + DEBT_RETRY_INTERVAL
    if presale:
        subscription.retention_case_kind = "presale_charge_failed"


def _not_charged(
    session: Session, transaction: PaymentTransaction, subscription: Subscription, *, now: datetime
) -> Applied:
    """The provider confirmed it never received the attempt: close it as not charged and
    schedule the next technical retry (5, 15, 60 minutes), at most three per obligation."""
    transaction.status = TransactionStatus.failed
    transaction.billing_resolution = {
        **(transaction.billing_resolution or {}),
        "decision": NOT_CHARGED,
        "evidence": {"source": "provider_lookup", "answer": "not_found", "at": now.isoformat()},
    }
    transaction.updated_at = now
    session.flush()
    failures = technical_failures(session, transaction.obligation_key)
    if failures > len(TECHNICAL_RETRY_DELAYS):
        return Applied(
            AppliedOutcome.not_charged, transaction.id, alert="technical_retries_exhausted"
        )
    subscription.retry_at = now + TECHNICAL_RETRY_DELAYS[failures - 1]
    subscription.updated_at = now
    return Applied(AppliedOutcome.not_charged, transaction.id)


# grant_period reads the membership only for its status, so without the organization its
# mapping joins in (lazy="joined"): every renewal would read that row for nothing.
_STATUS_ONLY = (lazyload(Membership.organization),)


def grant_period(session: Session, subscription: Subscription, *, now: datetime) -> None:
    """The paid period: a presale starts on its opening day, a renewal where the last ended,
    its session quota again (plans.refill_sessions).
    The first period (never started) also sets the start, the quota and membership.activated:
    a presale paid on its opening day, or paid later, its declined opening charge having
    put it in debt (spec B 2.1: no period, quota or credits until it is paid)."""
    first = subscription.started_at is None
    start = subscription.current_period_end or subscription.opening_day or now
    plan = None
    if first:
        plan = session.get(Plan, subscription.plan_id)
        start = subscription.opening_day or now
        subscription.started_at = subscription.started_at or start
        subscription.sessions_remaining = plan.sessions_quota if plan else None
    else:
        plans.refill_sessions(session, subscription)
    months = subscription.interval_months or 1
    local = billing_settings(session, subscription.organization_id).timezone
    end = add_months(start, months, local)  # on the gym's calendar (a presale opens at midnight)
    if plan is not None and subscription.interval_months is None and plan.validity_days:
        # A fixed term of days (it renews not): the term the desk sells it for, not a month.
        end = plans.term_from(plan, start, local)
    subscription.current_period_start = start
    subscription.current_period_end = end
    renews = subscription.interval_months is not None and (
        subscription.renewal_end is None or end < subscription.renewal_end
    )
    subscription.next_charge_date = end if renews else None
    subscription.retry_at = None
    if debt.restore_from_debt(subscription, now=now):
        close_paid_presale(session, subscription, now=now)  # its case: paid, the mark cleared
    subscription.status = SubscriptionStatus.active
    membership = session.get(Membership, subscription.membership_id, options=_STATUS_ONLY)
    if membership is not None and membership.status != MembershipStatus.active:
        membership.status = MembershipStatus.active
        membership.updated_at = now
    mirror.subscription_changed(session, subscription, now=now)
    if first:
        emit(
            session,
            EventKind.domain,
            "membership.activated",
            at=now,
            aggregate_type="subscription",
            aggregate_id=subscription.id,
            organization_id=subscription.organization_id,
            payload={"userId": str(subscription.user_id), "periodStart": start.isoformat()},
        )


SUPERSEDED = "superseded"


def held_again_by(session: Session, subscription: Subscription) -> Subscription | None:
    """The member's other active or scheduled subscription of this recurring plan, bought
    while this one was in debt (spec B 4.3 refuses only active and scheduled holders)."""
    if subscription.status not in (SubscriptionStatus.debt, SubscriptionStatus.past_due):
        return None
    plan = session.get(Plan, subscription.plan_id)
    if plan is None:
        return None
    return plans.live_holder(session, plan, subscription.user_id, other_than=subscription.id)


def end_superseded(
    session: Session, subscription: Subscription, holder: Subscription, *, now: datetime
) -> None:
    """A debt paid on a plan the member holds again: the payment restores the debt columns
    (spec B 3) but does not revive this subscription, since the plan is held once (spec B 4.3)
    and reviving it would bill the member twice. It ends, superseded by `holder`."""
    debt_since = subscription.debt_since
    subscription.status = SubscriptionStatus.cancelled
    debt.restore_from_debt(subscription, now=now)
    end_plan(
        session,
        subscription,
        reason=SUPERSEDED,
        now=now,
        supersededBy=str(holder.id),
        debtSince=_iso(debt_since),
    )


def end_plan(
    session: Session, subscription: Subscription, *, reason: str, now: datetime, **payload
) -> None:
    """End a plan at once (cancelled for `reason`): nothing renews or is retried, a notice
    still running ends with it (overtaken), the bridge membership follows,
    subscription.cancelled is written, the seats no other plan covers are given up. One never
    paid (scheduled: a presale before its opening day, a page not completed) gives its
    max_purchases place back, as withdrawing it does. Its debt columns are the caller's."""
    if subscription.status == SubscriptionStatus.scheduled:
        plans.release_purchase_slot(session, subscription.plan_id)
    subscription.status = SubscriptionStatus.cancelled
    subscription.cancellation_reason = reason
    subscription.cancelled_at = now
    subscription.ended_at = now
    subscription.next_charge_date = None
    subscription.retry_at = None
    subscription.updated_at = now
    end_overtaken_notice(session, subscription, now=now)
    mirror.subscription_changed(session, subscription, now=now)
    emit_cancelled(session, subscription, reason=reason, now=now, **payload)
    book.give_up_uncovered(session, subscription, now=now)  # the seats it alone paid for


def emit_cancelled(
    session: Session, subscription: Subscription, *, reason: str, now: datetime, **payload
) -> None:
    """The subscription.cancelled domain event of a plan ended one at a time (a matured notice,
    a withdrawn presale, a plan superseded); the lifecycle pass writes its own for non-payment."""
    emit(
        session,
        EventKind.domain,
        "subscription.cancelled",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        payload={"reason": reason, **payload, "userId": str(subscription.user_id)},
    )


def _snapshot(subscription: Subscription) -> dict[str, Any]:
    """What the attempt was computed from; drift is judged against it at settlement."""
    return {
        "status": subscription.status.value,
        "debtAmountInCents": subscription.debt_amount_in_cents,
        "nextChargeDate": _iso(subscription.next_charge_date),
    }


def _drift(transaction: PaymentTransaction, subscription: Subscription) -> str | None:
    """Another debt amount (debt_changed) or another charge date (retry_date_changed) than the
    attempt was computed from. A debt attempt whose plan ended while it was in flight (the
    member removed or erased, the plan cancelled for non-payment) is not drift: ending a plan
    clears its charge date, and the debt it owed stays owed (spec B 3), so the same debt (same
    day 0, same amount) paid is restored from debt and the plan stays ended (`settle`). A
    renewal's attempt on a plan that ended is still reviewed: it paid a period no one grants."""
    kind = transaction.attempt_kind
    snapshot = (transaction.billing_attempt or {}).get("snapshot") or {}
    if kind == AttemptKind.debt and subscription.debt_amount_in_cents != snapshot.get(
        "debtAmountInCents"
    ):
        return "debt_changed"
    if _iso(subscription.next_charge_date) != snapshot.get("nextChargeDate"):
        if _ended_owing_the_same_debt(transaction, subscription):
            return None
        return "retry_date_changed"
    return None


def _ended_owing_the_same_debt(transaction: PaymentTransaction, subscription: Subscription) -> bool:
    """A debt attempt's plan ended since it began (no charge date left) and still owes the
    debt the attempt collects: its obligation (the debt's day 0) is the same."""
    return (
        transaction.attempt_kind == AttemptKind.debt
        and subscription.next_charge_date is None
        and ended_with_debt(subscription)
        and obligation_of(subscription, AttemptKind.debt) == transaction.obligation_key
    )


def evidence_mismatch(attempt: dict[str, Any], result: ChargeResult) -> str | None:
    """A success counts only for the exact amount, currency and terminal of the attempt (spec
    B: reconcile with verified success); the field that differs, else None. Desk charges take
    the same rule: a deal known only on another terminal would be refunded where it is not."""
    if result.amount_in_cents is not None and result.amount_in_cents != attempt["amountInCents"]:
        return "amount"
    if result.currency is not None and result.currency != attempt["currency"]:
        return "currency"
    if result.terminal is not None and not same_terminal(result.terminal, attempt["terminal"]):
        return "terminal"
    return None


def _save_attempt(transaction: PaymentTransaction, attempt: dict[str, Any], now: datetime) -> None:
    transaction.billing_attempt = attempt
    transaction.updated_at = now


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None
