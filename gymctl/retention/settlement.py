"""The period-end sweep (spec B 3, 6, 7, 8): notices whose effective date has come.

Per subscription, in one transaction under its row lock:
1. cancel it; retention_outcome lost_contacted when staff logged a contact on its case, else
   lost_no_contact; the case closes with that outcome, and an open presale charge-failure
   case of the plan with it (`overtaken.close_with_plan`);
2. cancel the standing order: a failure opens a reminder task and cancels anyway;
3. claim the settlement: a cancellation_settlements row, unique per subscription, and the audit
   subscription.cancellation_settled {after: {amountInCents, mode}, execution}; a second run,
   or a second daemon, finds the claim and refunds nothing;
4. settle the refund owed (gymctl.retention.proration): a card charge is refunded through the
   provider (its unique id derives from the charge, so a retry after a crash is answered with
   the original outcome, never a second refund); any other payment becomes an owner task due
   in 3 days; a refund that throws becomes a high-priority owner task, and so, once, does
   one the provider leaves unanswered for an hour (a follow-up: it may have been made). A
   pay-later term still unpaid is prorated alike, its share taken off the balance owed
   (`mode` balance).
Then, after the commit, the membership-ended email with the refund's real state: the only
email about it. An email not handed over is retried by the next run; one that can never be
sent (nobody to tell, refused for good) is given up.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, not_, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.access.memberships import owner_of
from gymctl.billing.accounts import CARD_PROVIDER, billing_settings
from gymctl.billing.attempts import (
    FOLLOW_UP,
    SETTLED,
    UNANSWERED_ALERT_AFTER,
    emit_cancelled,
    lock_subscription,
    unresolved_attempt,
)
from gymctl.billing.debt import PAYMENT_DUE, restore_from_debt
from gymctl.billing.lifecycle import ends_by_itself, no_unresolved_attempt
from gymctl.billing.refunds import begin_refund, execute_refund, refundable_amount
from gymctl.bookings import book
from gymctl.bridge import mirror
from gymctl.clock import LONG_AGO
from gymctl.crypto import FieldCipher
from gymctl.db import each_committed, is_postgres, locked_row, release_for_outside_call
from gymctl.events import EventKind, emit
from gymctl.models import (
    CancellationNotice,
    CancellationSettlement,
    Organization,
    PaymentTransaction,
    RetentionCase,
    Subscription,
    User,
)
from gymctl.models.billing import (
    CollectionMethod,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.models.retention import CaseKind
from gymctl.providers.card import CardProvider
from gymctl.providers.documents import DocumentProvider
from gymctl.providers.mail import Mailer, MailError
from gymctl.retention import emails
from gymctl.retention.notices import case_of_notice, open_notice
from gymctl.retention.overtaken import close_with_plan, lost_outcome
from gymctl.retention.plan_change import NOTICE_STATUSES
from gymctl.retention.proration import prorated_refund, refund_days
from gymctl.retention.refund_owed import SEEN, refunds_of
from gymctl.tasks import close_task, file_task

log = logging.getLogger("gymctl.retention")
OWNER_TASK_DUE = timedelta(days=3)  # spec B 8: refund task / notice
BATCH = 200
NOTICE = "notice"
# A settlement's card refund the provider has not answered: its owner task's reason, and the
# ended plan's alert mark (told once).
REFUND_UNANSWERED = "settlement_refund_unanswered"


class StandingOrderError(Exception):
    """The standing order could not be cancelled; the message says where to do it by hand."""


def cancel_standing_order(session: Session, subscription: Subscription) -> str:
    """Stop the recurring collection. The protected collector's is ours: clearing the next
    charge stops it. Other providers collect on their own schedule and this toolkit has no
    client of theirs: that is a failure the owner resolves at the provider."""
    method = subscription.payment_collection_method
    if method == CollectionMethod.card_provider:
        subscription.next_charge_date = None
        subscription.retry_at = None
        return "cancelled"
    if method in (CollectionMethod.provider_direct, CollectionMethod.external):
        raise StandingOrderError(
            f"the {method.value} standing order must be cancelled at the provider"
        )
    return "none"  # cash and pay-later have no standing order


StandingOrders = Callable[[Session, Subscription], str]


@dataclass
class Doors:
    """The outside parts the sweep talks to."""

    provider: CardProvider
    cipher: FieldCipher
    documents: DocumentProvider
    mailer: Mailer
    standing_orders: StandingOrders = cancel_standing_order


@dataclass
class SweepResult:
    cancelled: list[str] = field(default_factory=list)
    refunded: int = 0
    owner_tasks: int = 0
    emailed: int = 0
    errors: int = 0  # notices whose settlement failed: logged, tried again next pass

    def as_dict(self) -> dict:
        return {
            "cancelled": self.cancelled,
            "refunded": self.refunded,
            "ownerTasks": self.owner_tasks,
            "emailed": self.emailed,
            "errors": self.errors,
        }


def _notices() -> list[Any]:
    """Notices not settled yet, matured or not."""
    settled = select(CancellationSettlement.id).where(
        CancellationSettlement.subscription_id == Subscription.id
    )
    return [
        Subscription.cancel_at_period_end.is_(True),
        Subscription.status.in_(NOTICE_STATUSES),
        Subscription.deleted_at.is_(None),
        ~settled.exists(),
    ]


def matured(session: Session, *, now: datetime, limit: int = BATCH) -> list[uuid.UUID]:
    """Notices effective by `now`, but for a plan whose own end came before its notice: the
    lifecycle pass ends that one by itself and overtakes the notice (s42), also when this sweep
    runs first after an outage (`lifecycle.ends_by_itself`). Disjoint from what the pass ends
    at `now`, so a row one takes the other never does. A plan whose charge attempt is
    unresolved waits for a later pass, as the lifecycle's rows do (`no_unresolved_attempt`):
    the charge may pay the next period, and the notice then ends that one
    (`overtaken.notice_follows_paid_period`); declined, the notice ends the plan now."""
    return list(
        session.scalars(
            select(Subscription.id)
            .where(
                *_notices(),
                Subscription.cancellation_effective_at <= now,
                not_(ends_by_itself(now)),
                no_unresolved_attempt(),
            )
            .order_by(Subscription.cancellation_effective_at, Subscription.id)
            .limit(limit)
        )
    )


def period_end_due(session: Session, *, after: datetime | None = None) -> datetime | None:
    """The first instant (after `after`, if given) at which `period_end_sweep` can act: when
    the first unsettled notice matures; while a refund or an email waits, at once (an instant
    long past: the pass retries them whatever the clock says)."""
    if session.scalar(_WAITING):
        return LONG_AGO
    if after is None:
        return session.scalar(_FIRST_NOTICE)
    return session.scalar(_FIRST_NOTICE_AFTER, {"after": after})


# period_end_due's statements, built once (the forecast asks after most ticks).
_WAITING = select(
    select(CancellationSettlement.id)
    .where(
        (CancellationSettlement.execution == "refund_pending")
        | CancellationSettlement.email_sent_at.is_(None)
    )
    .exists()
)
# Said not null as well (min ignores nulls): an index range per status that starts past the
# rows with no notice, rather than a walk of every active subscription (1 ms -> 0.02 ms at
# 5,000 subscriptions on the forecast's scratch copy).
_FIRST_NOTICE = select(func.min(Subscription.cancellation_effective_at)).where(
    *_notices(), Subscription.cancellation_effective_at.is_not(None)
)
_FIRST_NOTICE_AFTER = _FIRST_NOTICE.where(
    Subscription.cancellation_effective_at > bindparam("after")
)


def last_charge(session: Session, subscription: Subscription) -> PaymentTransaction | None:
    """The payment of the current period: the newest settled charge or renewal. A charge
    already refunded (or being refunded) is still that payment, so what is left of it bounds the
    refund; skipping it would refund an older period's charge."""
    return session.scalar(
        select(PaymentTransaction)
        .where(
            PaymentTransaction.subscription_id == subscription.id,
            PaymentTransaction.type.in_((TransactionType.charge, TransactionType.recurring)),
            PaymentTransaction.status.in_(SETTLED),
        )
        .order_by(PaymentTransaction.created_at.desc(), PaymentTransaction.id.desc())
    )


def left_of(session: Session, charge: PaymentTransaction) -> int:
    """What is left of the charge to give back: less refunds and credit notes, and less a
    refund on its way (refund_pending: the provider may have paid it). Counting only completed
    refunds owed the member money a staff refund in flight was already returning."""
    in_flight = session.scalar(
        select(func.coalesce(func.sum(PaymentTransaction.amount_in_cents), 0)).where(
            PaymentTransaction.type == TransactionType.refund,
            PaymentTransaction.status == TransactionStatus.refund_pending,
            PaymentTransaction.metadata_["refundedTransactionId"].as_string() == str(charge.id),
        )
    )
    return refundable_amount(charge) - int(in_flight)


def _owner_task(
    session: Session,
    subscription: Subscription,
    *,
    kind: str,
    title: str,
    priority: str,
    detail: str,
    data: dict,
    now: datetime,
    subject: tuple[str, str] | None = None,
):
    """A task for the gym's owner on the subscription (or on `subject`: type and id)."""
    subject_type, subject_id = subject or ("subscription", str(subscription.id))
    owner = owner_of(session, subscription.organization_id)
    task = file_task(
        session,
        organization_id=subscription.organization_id,
        kind=kind,
        subject_type=subject_type,
        subject_id=subject_id,
        title=title,
        priority=priority,
        due_at=now + OWNER_TASK_DUE,
        now=now,
        detail=detail,
        data=data,
        linked_user_id=subscription.user_id,
    )
    task.assignee_id = owner.user_id if owner is not None else None
    return task


def settle_one(
    session: Session, subscription: Subscription, doors: Doors, *, now: datetime
) -> CancellationSettlement:
    """Steps 1-4 for one locked, matured subscription (the caller commits)."""
    effective = subscription.cancellation_effective_at
    notice = open_notice(session, subscription.id)
    case = case_of_notice(session, notice)
    outcome = lost_outcome(session, subscription, case)
    subscription.status = SubscriptionStatus.cancelled
    subscription.cancelled_at = now
    subscription.ended_at = effective
    subscription.retention_outcome = outcome.value
    subscription.cancellation_reason = subscription.cancellation_reason or NOTICE
    subscription.updated_at = now
    mirror.subscription_changed(session, subscription, now=now)
    book.give_up_uncovered(session, subscription, now=now)  # it renews no more: its seats after
    close_with_plan(session, subscription, case, outcome, now=now)  # a presale case too
    try:
        standing_order = doors.standing_orders(session, subscription)
    except StandingOrderError as error:
        standing_order = "failed"
        _owner_task(
            session,
            subscription,
            kind="standing_order_cancellation",
            title="Cancel the member's standing order at the payment provider",
            priority="high",
            detail=str(error),
            data={"subscriptionId": str(subscription.id)},
            now=now,
        )
    charge = last_charge(session, subscription)
    if charge is not None:  # after the subscription (billing's order): refunds wait for us
        charge = locked_row(session, PaymentTransaction, charge.id)
    charge_cents = charge.amount_in_cents if charge is not None else 0
    days = refund_days(
        # From the term's start when it has not begun (a desk sale before the gym's opening
        # day): the days before it were never paid for.
        max(effective, subscription.current_period_start or effective),
        subscription.current_period_end,
        subscription.cash_pauses,
        timezone=billing_settings(session, subscription.organization_id).timezone,
    )
    balance = _unpaid_balance(subscription) if charge is None else 0
    if balance:  # owed, not paid: prorated as a payment is (spec B 8), and taken off it
        charge_cents = balance
    amount = prorated_refund(charge_cents, days)
    if charge is not None:
        amount = min(amount, left_of(session, charge))
    if amount <= 0:
        mode, execution = "none", "nothing_owed"
    elif balance:
        mode, execution = "balance", "balance_reduced"
        _reduce_balance(subscription, amount, now=now)
    elif charge.provider == CARD_PROVIDER and charge.provider_transaction_id:
        mode, execution = "card", "pending"
    else:
        mode, execution = "manual", "owner_task"
    settlement = CancellationSettlement(
        id=ids.new_id(),
        organization_id=subscription.organization_id,
        subscription_id=subscription.id,
        effective_at=effective,
        period_end=subscription.current_period_end,
        charge_transaction_id=charge.id if charge is not None else None,
        charge_amount_in_cents=charge_cents,
        days=days,
        amount_in_cents=max(amount, 0),
        currency=subscription.currency,
        mode=mode,
        execution=execution,
        standing_order=standing_order,
        # The refunds its amount already counted, those on their way included (left_of): one
        # completing later is not money back towards what this settlement owes.
        detail=(
            {SEEN: [str(row.id) for row in refunds_of(session, charge, in_flight=True)]}
            if charge
            else {}
        ),
        created_at=now,
        updated_at=now,
    )
    session.add(settlement)
    session.flush()  # the claim: a second settlement of this subscription fails here
    if mode == "card":
        try:  # stored with the claim; the sweep sends it after committing (execute_card_refund)
            refund = begin_refund(
                session,
                transaction=charge,
                amount_cents=amount,
                reason="unused paid period after a cancellation notice",
                actor_user_id=None,
                now=now,
                documents=doors.documents,
                source="notice_settlement",
                metadata={"subscriptionId": str(subscription.id)},
            )
            settlement.execution = "refund_pending"
            settlement.refund_transaction_id = refund.id
        except Exception as error:  # any failure, not only DomainError: the owner takes it
            code = getattr(error, "code", type(error).__name__)
            _refund_failed(session, settlement, subscription, code, now=now)
    elif mode == "manual":
        _owner_task(
            session,
            subscription,
            kind="manual_refund",
            title="Refund owed after a cancellation: return it to the member",
            priority="high",
            detail=(
                f"return {emails.money(amount, subscription.currency)} (paid by {charge.provider})"
            ),
            data={"subscriptionId": str(subscription.id), "amountInCents": amount},
            now=now,
        )
    emit(
        session,
        EventKind.audit,
        "subscription.cancellation_settled",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        payload={
            "after": {"amountInCents": settlement.amount_in_cents, "mode": mode},
            "execution": settlement.execution,
            "days": days,
            "chargeInCents": charge_cents,
            "standingOrder": standing_order,
        },
    )
    emit_cancelled(session, subscription, reason=NOTICE, now=now, retentionOutcome=outcome.value)
    session.flush()
    return settlement


def _unpaid_balance(subscription: Subscription) -> int:
    """A pay-later term's balance still unpaid (0 for other plans): what its member owes for
    the whole term, the unused days included."""
    if subscription.payment_collection_method != CollectionMethod.pay_later:
        return 0
    return subscription.unpaid_amount_in_cents or 0


def _reduce_balance(subscription: Subscription, amount: int, *, now: datetime) -> None:
    """The unused days' share comes off the pay-later balance, and off its debt when the due
    day has opened it (the debt is that balance): the share a card member who paid the term
    would get back (spec B 8's proration, the same formula) is not owed."""
    subscription.unpaid_amount_in_cents -= amount
    if subscription.debt_reason == PAYMENT_DUE and subscription.debt_amount_in_cents:
        subscription.debt_amount_in_cents = max(subscription.debt_amount_in_cents - amount, 0)
        if not subscription.debt_amount_in_cents:
            restore_from_debt(subscription, now=now)  # the plan has ended: only the columns


def _refund_failed(
    session: Session,
    settlement: CancellationSettlement,
    subscription: Subscription,
    code: str,
    *,
    now: datetime,
) -> None:
    settlement.execution = "refund_failed"
    settlement.detail = {**(settlement.detail or {}), "error": code}
    settlement.updated_at = now
    amount = settlement.amount_in_cents
    _owner_task(
        session,
        subscription,
        kind="manual_refund",
        title="Refund owed after a cancellation: the automatic refund failed",
        priority="high",
        detail=f"refund of {emails.money(amount, subscription.currency)} failed: {code}",
        data={"subscriptionId": str(subscription.id), "amountInCents": amount},
        now=now,
    )


def execute_card_refund(
    factory: sessionmaker[Session], doors: Doors, settlement_id: uuid.UUID, *, now: datetime
) -> str:
    """Send a settlement's stored card refund (committed with the claim) and record how it
    ended: refunded, refund_failed (the provider refused: an owner task) or still
    refund_pending (nothing known: the next sweep sends the same refund again)."""
    with factory() as session:
        settlement = session.scalar(
            select(CancellationSettlement)
            .where(CancellationSettlement.id == settlement_id)
            .with_for_update(skip_locked=True)
        )
        if settlement is None or settlement.execution != "refund_pending":
            return settlement.execution if settlement is not None else "busy"
        refund = execute_refund(
            session,
            doors.provider,
            doors.cipher,
            settlement.refund_transaction_id,
            now=now,
            documents=doors.documents,
        )
        if refund.status == TransactionStatus.refunded:
            settlement.execution = "refunded"
            settlement.updated_at = now
        elif refund.status == TransactionStatus.failed:
            subscription = session.get(Subscription, settlement.subscription_id)
            _refund_failed(session, settlement, subscription, "refund_declined", now=now)
        elif now - refund.created_at >= UNANSWERED_ALERT_AFTER:
            _refund_unanswered(session, settlement, now=now)
        if refund.status != TransactionStatus.refund_pending:
            close_task(  # its outcome known: refunded, or the owner's manual_refund task
                session,
                organization_id=settlement.organization_id,
                kind=FOLLOW_UP,
                subject_type="payment_transaction",
                subject_id=str(refund.id),
                because=f"refund_{refund.status.value}",
                reason=REFUND_UNANSWERED,
                now=now,
            )
        session.commit()
        return settlement.execution


def _refund_unanswered(
    session: Session, settlement: CancellationSettlement, *, now: datetime
) -> None:
    """The card provider has left the refund unanswered for UNANSWERED_ALERT_AFTER: the owner
    is told, once, that the member may be owed money: the mark is kept in the settlement's
    detail (its row is the caller's lock; the plan's, which billing locks before a payment's,
    is only read, and its one alert mark is shared with the collector's alerts). A follow-up
    to check at the provider, not a manual_refund: the provider may have made it, and the
    sweep keeps sending it under its own unique id."""
    detail = settlement.detail or {}
    if detail.get(REFUND_UNANSWERED):
        return
    settlement.detail = {**detail, REFUND_UNANSWERED: now.isoformat()}
    subscription = session.get(Subscription, settlement.subscription_id)
    amount = emails.money(settlement.amount_in_cents, settlement.currency)
    _owner_task(
        session,
        subscription,
        kind=FOLLOW_UP,
        title="Refund owed after a cancellation: the card provider has not answered",
        priority="high",
        detail=(
            f"the refund of {amount} is unconfirmed; check it at the card provider (do not "
            "refund again: it is resent under the same id until answered)"
        ),
        data={
            "reason": REFUND_UNANSWERED,
            "subscriptionId": str(subscription.id),
            "amountInCents": settlement.amount_in_cents,
        },
        now=now,
        subject=("payment_transaction", str(settlement.refund_transaction_id)),
    )


REFUND_STATE = {
    "refunded": "refunded",
    "refund_failed": "processing",
    "refund_pending": "processing",
    "owner_task": "processing",
    "nothing_owed": "none",
    "balance_reduced": "reduced",
}


def send_ended_email(
    session: Session, settlement: CancellationSettlement, mailer: Mailer, *, now: datetime
) -> bool:
    """The membership-ended email, telling the refund as it stands; True once handed over.
    One that can never be sent (nobody to tell, refused for good) is given up; a temporary
    failure is retried."""
    subscription = session.get(Subscription, settlement.subscription_id)
    member = session.get(User, subscription.user_id)
    if member is None or not member.email or member.deleted_at is not None:
        _give_up_email(session, settlement, "no_address", now=now)
        return False
    case = session.scalar(
        select(RetentionCase)
        .where(
            RetentionCase.subscription_id == subscription.id,
            RetentionCase.kind == CaseKind.cancellation_notice.value,
        )
        .order_by(RetentionCase.opened_at.desc())
    )
    gym = session.get(Organization, subscription.organization_id)
    to, settlement_id = member.email, settlement.id  # the release expires the rows read
    locale = case.locale if case is not None else None
    context = {
        "gym": gym.name,
        "member": emails.display_name(member),
        "ended_on": emails.local_day(session, gym.id, settlement.effective_at),
        "given_by": _notice_given_by(session, subscription),
        "refund_state": REFUND_STATE.get(settlement.execution, "processing"),
        "amount": emails.money(settlement.amount_in_cents, settlement.currency),
    }
    release_for_outside_call(session)  # only read: no write lock while the mail server answers
    try:
        emails.send(
            mailer, to=to, name="membership_ended", locale=locale, tag="membership_ended", **context
        )
    except MailError as error:
        settlement = locked_row(session, CancellationSettlement, settlement_id)
        if error.permanent and settlement.email_sent_at is None:
            _give_up_email(session, settlement, str(error), now=now)
        elif not error.permanent:
            log.warning("membership-ended email not sent, retried next run: %s", error)
        return False
    settlement = locked_row(session, CancellationSettlement, settlement_id)
    if settlement.email_sent_at is not None:
        return True  # recorded by another run meanwhile
    settlement.email_sent_at = now
    settlement.updated_at = now
    return True


def _give_up_email(
    session: Session, settlement: CancellationSettlement, reason: str, *, now: datetime
) -> None:
    """email_sent_at ends the retries; the audit says it was given up, not sent."""
    settlement.email_sent_at = now
    settlement.updated_at = now
    emails.give_up(
        session,
        email="membership_ended",
        reason=reason,
        aggregate_type="cancellation_settlement",
        aggregate_id=settlement.id,
        organization_id=settlement.organization_id,
        now=now,
    )


def _notice_given_by(session: Session, subscription: Subscription) -> str:
    """Who gave the notice that ended the plan (member or staff): the email says so."""
    initiator = session.scalar(
        select(CancellationNotice.initiator)
        .where(
            CancellationNotice.subscription_id == subscription.id,
            CancellationNotice.withdrawn_at.is_(None),
        )
        .order_by(CancellationNotice.given_at.desc())
        .limit(1)
    )
    return initiator or "member"


def period_end_sweep(
    factory: sessionmaker[Session], doors: Doors, *, now: datetime, limit: int = BATCH
) -> SweepResult:
    """Settle every matured notice (one transaction each), then send the emails.

    A notice whose rows another daemon holds is skipped, then tried once more after the others,
    waiting for the lock this time (at most WAIT_FOR_ROWS): the holder may be settling another
    plan of the same member (the membership row is locked first), and while it held that row
    for its next notice the other daemon, having skipped this one, moved on: two sweeps at
    once each left it to the other, and it waited a pass."""
    result = SweepResult()
    for settlement_id in unresolved_refunds(factory, limit=limit):  # a crash, a lost answer
        try:
            execution = execute_card_refund(factory, doors, settlement_id, now=now)
        except Exception:
            # As a notice's fault below: one refund that raises (its account's credentials
            # unreadable, say) stopped every pass before any matured notice was settled.
            log.exception("resending the refund of settlement %s failed", settlement_id)
            result.errors += 1
            continue
        result.refunded += execution == "refunded"
        result.owner_tasks += execution == "refund_failed"
    with factory() as session:
        due = matured(session, now=now, limit=limit)

    def settle(subscription_id: uuid.UUID, *, wait: bool) -> bool:
        # One notice's fault is logged and counted, not raised: the notices are taken oldest
        # first, and one whose settlement raised stopped every pass there (no member behind it
        # was settled). Its transaction rolled back, it is tried next pass.
        try:
            return _settle_matured(factory, doors, subscription_id, result, now=now, wait=wait)
        except Exception:
            log.exception("settling the notice of subscription %s failed", subscription_id)
            result.errors += 1
            return True

    busy = [i for i in due if not settle(i, wait=False)]
    for subscription_id in busy:
        settle(subscription_id, wait=True)
    result.emailed = send_pending_emails(factory, doors.mailer, now=now, limit=limit)
    return result


# A try's wait for rows another transaction holds: a settlement's, or the lifecycle's
# hourly pass (up to 10,000 rows a step); a holder left idle in its transaction must not stop
# the sweep for good.
WAIT_FOR_ROWS = "30s"
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's lock_not_available, lock_timeout's error


def _settle_matured(
    factory: sessionmaker[Session],
    doors: Doors,
    subscription_id: uuid.UUID,
    result: SweepResult,
    *,
    now: datetime,
    wait: bool,
) -> bool:
    """Settle one matured notice and send its refund; False when another daemon holds its
    rows (only without `wait`). A notice settled meanwhile, withdrawn or not yet effective is
    left alone, and so is one whose plan has a charge attempt unresolved (`matured`)."""
    with factory() as session:
        if is_postgres(session):
            # Both tries: the first skips a held plan, but the waiting members it locks first
            # (`may_end_at`) are waited for, and a holder idle in its transaction must not
            # stop the sweep there either.
            session.execute(text(f"SET LOCAL lock_timeout = '{WAIT_FOR_ROWS}'"))
        try:
            # It ends the plan and gives up its seats: billing's order for that (`may_end_at`).
            subscription = lock_subscription(
                session, subscription_id, skip_locked=not wait, may_end_at=now
            )
        except OperationalError as error:
            if getattr(error.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            return wait  # held past the wait: the waiting try, else the next pass, takes it
        if subscription is None:
            return wait  # gone, or held by another daemon
        if (
            not subscription.cancel_at_period_end
            or subscription.status not in NOTICE_STATUSES
            or subscription.cancellation_effective_at > now
            or session.scalar(
                select(CancellationSettlement.id).where(
                    CancellationSettlement.subscription_id == subscription_id
                )
            )
            is not None
        ):
            return True  # another daemon settled it
        if unresolved_attempt(session, subscription_id) is not None:
            return True  # a charge began since it was selected: a later pass, once it settles
        settlement = settle_one(session, subscription, doors, now=now)
        session.commit()
    execution = settlement.execution
    if execution == "refund_pending":
        execution = execute_card_refund(factory, doors, settlement.id, now=now)
    result.cancelled.append(str(subscription_id))
    result.refunded += execution == "refunded"
    result.owner_tasks += execution in ("refund_failed", "owner_task")
    return True


def unresolved_refunds(factory: sessionmaker[Session], *, limit: int) -> list[uuid.UUID]:
    with factory() as session:
        return list(
            session.scalars(
                select(CancellationSettlement.id)
                .where(CancellationSettlement.execution == "refund_pending")
                .order_by(CancellationSettlement.created_at, CancellationSettlement.id)
                .limit(limit)
            )
        )


def send_pending_emails(
    factory: sessionmaker[Session], mailer: Mailer, *, now: datetime, limit: int = BATCH
) -> int:
    with factory() as session:
        pending = session.scalars(
            select(CancellationSettlement.id)
            .where(CancellationSettlement.email_sent_at.is_(None))
            .order_by(CancellationSettlement.created_at, CancellationSettlement.id)
            .limit(limit)
        ).all()

    def send(session: Session, settlement_id: uuid.UUID) -> str:
        settlement = session.scalar(
            select(CancellationSettlement)
            .where(
                CancellationSettlement.id == settlement_id,
                CancellationSettlement.email_sent_at.is_(None),
            )
            .with_for_update(skip_locked=True)
        )
        if settlement is None:
            return "skipped"
        return "sent" if send_ended_email(session, settlement, mailer, now=now) else "unsent"

    # An email that fails unexpectedly is logged and left for the next run: the oldest goes
    # first, so raising here stopped every run at it and no member behind it was told.
    counts = {"sent": 0, "unsent": 0, "skipped": 0, "failed": 0}
    return each_committed(
        factory, pending, send, counts, what="membership-ended email of settlement"
    )["sent"]
