"""The protected collector's passes (spec B 1, 6, 8): the catch-up pass, the daily sweep, the
manual and debt recovery, and the side-effect recovery.

Every pass drives `attempts` in its own short transactions (the attempt is committed before the
provider is called), so a pass takes a session factory rather than one session. Organizations
on other providers are never selected: they keep provider-direct collection.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Integer, bindparam, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from gymctl.billing import attempts
from gymctl.billing.accounts import CARD_PROVIDER
from gymctl.billing.alerts import first_of_its_state, raise_alert
from gymctl.billing.attempts import AppliedOutcome, BeganOutcome
from gymctl.crypto import FieldCipher
from gymctl.db import READ_ONLY
from gymctl.models import PaymentProviderConfig, PaymentTransaction, Subscription, Task
from gymctl.models.billing import CollectionMethod, SubscriptionStatus, TransactionStatus
from gymctl.providers.card import CardProvider

logger = logging.getLogger(__name__)

CATCHUP_ORGANIZATIONS = 20  # spec B 8
CATCHUP_PER_ORGANIZATION = 5
CATCHUP_BUDGET_SECONDS = 30.0
RECOVERY_BATCH = 200
SIDE_EFFECTS_STALE = timedelta(minutes=15)


@dataclass
class Summary:
    """Counts of one pass (spec B 6) and the alerts it raised."""

    organizations: int = 0
    unevaluable: int = 0
    selected: int = 0
    charged: int = 0
    declined: int = 0
    busy: int = 0
    blocked: int = 0
    skipped: int = 0
    errors: int = 0
    pending: int = 0
    resolved: int = 0
    alerts: list[dict[str, str]] = field(default_factory=list)
    completed: bool = True  # False when the time budget stopped new work

    def alert(self, reason: str, **ids: Any) -> None:
        self.alerts.append(raise_alert(reason, **ids))

    def count(self, outcome: BeganOutcome | AppliedOutcome) -> None:
        """The outcomes a pass reports, each by name (started, already_resolved, contradiction
        and not_charged are not counts)."""
        match outcome:
            case AppliedOutcome.charged:
                self.charged += 1
            case AppliedOutcome.declined:
                self.declined += 1
            case AppliedOutcome.pending:
                self.pending += 1
            case BeganOutcome.busy:
                self.busy += 1
            case BeganOutcome.blocked:
                self.blocked += 1
            case BeganOutcome.skipped:
                self.skipped += 1

    @property
    def useful(self) -> bool:
        """A completed run that evaluated something without errors: worth a heartbeat."""
        return self.completed and self.errors == 0 and self.organizations > 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def collect_subscription(
    factory: sessionmaker[Session],
    subscription_id: uuid.UUID,
    provider: CardProvider,
    *,
    now: datetime,
    cipher: FieldCipher,
    summary: Summary,
    kind: attempts.AttemptKind | None = None,
) -> BeganOutcome | AppliedOutcome:
    """Store the attempt and commit, call the provider, apply the answer: one charge at most."""
    with factory() as session:
        began = attempts.begin_attempt(session, subscription_id, now=now, cipher=cipher, kind=kind)
        if began.outcome != BeganOutcome.started:
            session.rollback()
            summary.count(began.outcome)
            if began.alert and first_of_its_state(session, subscription_id, began.alert):
                summary.alert(began.alert, subscriptionId=subscription_id)
            session.commit()
            return began.outcome
        session.commit()
        result = attempts.send_attempt(began, provider)
        applied = attempts.apply_outcome(session, began.transaction_id, result, now=now)
        session.commit()
    summary.count(applied.outcome)
    if applied.alert:
        summary.alert(
            applied.alert, subscriptionId=subscription_id, transactionId=applied.transaction_id
        )
    return applied.outcome


def catch_up(
    factory: sessionmaker[Session],
    provider: CardProvider,
    *,
    now: datetime,
    cipher: FieldCipher,
    monotonic: Callable[[], float] = time.monotonic,
    organizations: int = CATCHUP_ORGANIZATIONS,
    per_organization: int = CATCHUP_PER_ORGANIZATION,
    budget_seconds: float = CATCHUP_BUDGET_SECONDS,
) -> Summary:
    """Every minute: due card-provider subscriptions, at most 20 organizations and 5 each; no
    new work starts once the 30 s monotonic budget is spent."""
    return _collect_due(
        factory,
        provider,
        now=now,
        cipher=cipher,
        monotonic=monotonic,
        organizations=organizations,
        per_organization=per_organization,
        budget_seconds=budget_seconds,
    )


def daily_sweep(
    factory: sessionmaker[Session],
    provider: CardProvider,
    *,
    now: datetime,
    cipher: FieldCipher,
    monotonic: Callable[[], float] = time.monotonic,
) -> Summary:
    """02:00 UTC: every due card-provider subscription of every organization."""
    return _collect_due(factory, provider, now=now, cipher=cipher, monotonic=monotonic)


def pending_attempts(session: Session) -> list[uuid.UUID]:
    """The ids of the pending protected attempts recovery asks the provider about: one batch,
    in attempts.ASKING_ORDER (`recover` marks one that stays pending as asked)."""
    return list(
        session.scalars(
            select(PaymentTransaction.id)
            .where(*_pending())
            .order_by(*attempts.ASKING_ORDER)
            .limit(RECOVERY_BATCH)
        )
    )


def _pending() -> list[Any]:
    return [
        PaymentTransaction.status == TransactionStatus.pending,
        PaymentTransaction.attempt_kind.is_not(None),
        PaymentTransaction.provider == CARD_PROVIDER,
    ]


_PENDING_ATTEMPTS = select(PaymentTransaction.billing_attempt).where(*_pending())


def recovery_due(session: Session, *, after: datetime | None = None) -> datetime | None:
    """The first instant (after `after`, if given) at which `recover` can act: a pending
    attempt's executing grace ends, or a debt enters the due scan."""
    stored = session.scalars(_PENDING_ATTEMPTS)
    instants = [attempts.executing_until(attempt or {}) for attempt in stored]
    instants.append(next_due(session, after=after, statuses=(SubscriptionStatus.debt,)))
    later = (i for i in instants if i is not None and (after is None or i > after))
    return min(later, default=None)


def recover(
    factory: sessionmaker[Session],
    provider: CardProvider,
    *,
    now: datetime,
    cipher: FieldCipher,
    monotonic: Callable[[], float] = time.monotonic,
) -> Summary:
    """Every 5 minutes: resolve pending attempts by asking the provider about their stored
    ids, then collect debts whose retry day has come."""
    summary = Summary()
    started = monotonic()  # the debts' charges begin after the lookups (charging_at)
    with factory() as session:
        pending = pending_attempts(session)
    for transaction_id in pending:
        with factory() as session:
            try:
                applied = attempts.resolve_attempt(
                    session, transaction_id, provider, now=now, cipher=cipher
                )
                if applied.outcome in (AppliedOutcome.pending, AppliedOutcome.contradiction):
                    attempts.mark_asked(session, transaction_id, now)
                session.commit()
            except Exception:
                logger.exception("resolving attempt %s failed", transaction_id)
                summary.errors += 1
                continue
        if applied.outcome in (AppliedOutcome.pending, AppliedOutcome.contradiction):
            summary.pending += 1  # a contradiction stays pending too
        else:
            summary.resolved += 1
            summary.count(applied.outcome)
        if applied.alert:
            summary.alert(applied.alert, transactionId=transaction_id)
    debts = _collect_due(
        factory,
        provider,
        now=now,
        cipher=cipher,
        monotonic=monotonic,
        started=started,
        statuses=(SubscriptionStatus.debt,),
    )
    return _merge(summary, debts)


def side_effect_recovery(factory: sessionmaker[Session], *, now: datetime) -> Summary:
    """Every 5 minutes: settled transactions whose delivered-effects record was left open
    (a settlement review waits for staff) are reported until a person closes them (marks the
    payment's follow-up task done: `reviewed`): once per state of their subscription (its
    collector alert mark, `billing_alert`), not every pass. The told-once mark is the
    payment's own (`effects[TOLD]`, the plan's mark it was told under): kept on the plan's
    one mark, it swapped with a collector alert of the same plan (collection blocked), and
    both paged at every pass. A payment whose plan is gone is told once. Each mark is
    written under the payment's own row lock, the effects and the plan's mark read again
    there (two passes, or a collector alert committed since the batch was read, tell it
    once), and committed on its own."""
    summary = Summary()
    reason = "settlement_side_effects_pending"
    with factory() as session:
        rows = session.execute(
            select(
                PaymentTransaction.id,
                PaymentTransaction.subscription_id,
                PaymentTransaction.effects,
                Subscription.billing_alert,
            )
            .outerjoin(Subscription, Subscription.id == PaymentTransaction.subscription_id)
            .where(
                PaymentTransaction.status == TransactionStatus.completed,
                PaymentTransaction.effects.is_not(None),
                PaymentTransaction.updated_at <= now - SIDE_EFFECTS_STALE,
            )
        ).all()
        rows = [row for row in rows if effects_open(row.effects)]
        done = reviewed(session, [row.id for row in rows])
        session.rollback()
        for transaction_id, subscription_id, effects, state in rows:
            if transaction_id in done:
                continue
            summary.selected += 1
            if _told_under(effects, state) or not _mark_told(session, transaction_id, now):
                continue
            summary.alert(reason, transactionId=transaction_id, subscriptionId=subscription_id)
    return summary


TOLD = "toldPending"  # effects[TOLD]: the plan's alert mark the pending effects were told under


def effects_open(effects: dict[str, Any] | None) -> bool:
    """A settled payment's effects not all delivered: its plan or membership still owed."""
    return not {"subscription", "membership"} <= set((effects or {}).get("done", []))


def reviewed(session: Session, transaction_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Of these settled payments, those whose follow-up task staff have marked done: what its
    settlement review asked (a period to grant by hand, one of two payments to refund) is
    done, so the payment is counted and told no more. Filed again (a new question on the same
    payment), the task is open and the payment counted again."""
    named = {str(transaction_id): transaction_id for transaction_id in transaction_ids}
    if not named:
        return set()
    done = session.scalars(
        select(Task.subject_id).where(
            Task.kind == attempts.FOLLOW_UP,
            Task.subject_type == "payment_transaction",
            Task.subject_id.in_(list(named)),
            Task.status == "done",
            Task.deleted_at.is_(None),
        )
    )
    return {named[subject_id] for subject_id in done}


def _told_under(effects: dict[str, Any], state: str | None) -> bool:
    told = effects.get(TOLD)
    return told is not None and told.get("state") == state


def _mark_told(session: Session, transaction_id: uuid.UUID, now: datetime) -> bool:
    """Mark the payment told under its plan's mark, committed; False when it needs no telling
    now (closed or told meanwhile). Its row alone is locked, its key not (a settlement naming
    it need not wait)."""
    effects = session.scalar(
        select(PaymentTransaction.effects)
        .where(PaymentTransaction.id == transaction_id)
        .with_for_update(key_share=True)
    )
    state = session.scalar(
        select(Subscription.billing_alert)
        .join(PaymentTransaction, PaymentTransaction.subscription_id == Subscription.id)
        .where(PaymentTransaction.id == transaction_id)
    )
    if not effects_open(effects) or _told_under(effects, state):
        session.rollback()
        return False
    session.execute(
        update(PaymentTransaction)
        .where(PaymentTransaction.id == transaction_id)
        .values(effects={**effects, TOLD: {"state": state, "at": now.isoformat()}})
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return True


def ping_heartbeat(url: str | None, summary: Summary, *, name: str) -> bool:
    """memberBillingCatchup / memberRecurringCharge: pinged only after a completed useful run."""
    if not url or not summary.useful:
        return False
    try:
        httpx.get(url, timeout=5.0).raise_for_status()
    except httpx.HTTPError as error:
        logger.warning("heartbeat %s failed: %s", name, type(error).__name__)
        return False
    return True


def _collect_due(
    factory: sessionmaker[Session],
    provider: CardProvider,
    *,
    now: datetime,
    cipher: FieldCipher,
    monotonic: Callable[[], float] = time.monotonic,
    organizations: int | None = None,
    per_organization: int | None = None,
    budget_seconds: float | None = None,
    started: float | None = None,
    statuses: tuple[SubscriptionStatus, ...] = attempts.COLLECTABLE,
) -> Summary:
    """Collect what is due; `started`: when the pass began on `monotonic` (now), if earlier."""
    summary = Summary()
    started = monotonic() if started is None else started
    # The plan, then each organization's due list just before its turn: reads that take no
    # write lock on the embedded default (a writer there waits for nobody's scan).
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        plan = due_by_organization(session, now=now, statuses=statuses, organizations=organizations)
        summary.unevaluable = unevaluable(session, now=now)
    for organization_id in plan:
        summary.organizations += 1
        with factory() as session:
            session.connection(execution_options=READ_ONLY)
            due = due_in(session, organization_id, now=now, statuses=statuses)
        if per_organization is not None:
            due = due[:per_organization]
        for subscription_id in due:
            ran = monotonic() - started
            if budget_seconds is not None and ran >= budget_seconds:
                summary.completed = False
                summary.skipped += 1
                continue
            summary.selected += 1
            try:
                collect_subscription(
                    factory,
                    subscription_id,
                    provider,
                    now=charging_at(now, ran),
                    cipher=cipher,
                    summary=summary,
                )
            except Exception:
                logger.exception("collecting subscription %s failed", subscription_id)
                summary.errors += 1
    return summary


# A charge's instant is the pass's clock to this step. The executing grace (90 s) less the
# provider's timeout (30 s, GYMCTL_CARD_PROVIDER_TIMEOUT) leaves a minute: an attempt stamped up
# to ten seconds early still outlives its call. A pass's first ten seconds keep its tick's
# instant, the instant a test's fixed clock reads.
CHARGING_STEP_SECONDS = 10


def charging_at(now: datetime, ran: float) -> datetime:
    """The instant a pass's charge begins: the pass's `now` advanced by the time it has run,
    down to CHARGING_STEP_SECONDS. The attempt's startedAt is when it was stored, and its 90 s
    executing grace counts from there: a daily sweep of a thousand renewals runs for many
    minutes, and an attempt stored late in it but stamped with the sweep's 02:00 looked past
    its grace to the recovery pass running beside it, which then asked the provider about a
    charge still on its way, took its "not found" for a confirmed non-charge, and retried it
    under a new id: the member was charged twice."""
    step = CHARGING_STEP_SECONDS
    return now + timedelta(seconds=int(ran // step) * step)


def _collectable(statuses: tuple[SubscriptionStatus, ...], at: Any) -> list[Any]:
    """The due scan's terms at the instant `at` of the charge (the bound `now`, or the column
    naming the instant a plan comes due): all but the notice rule's read no clock."""
    return [
        Subscription.deleted_at.is_(None),
        Subscription.status.in_(statuses),
        Subscription.payment_collection_method == CollectionMethod.card_provider,
        Subscription.price_in_cents > 0,  # a free plan rolls on in the lifecycle, never charged
        ~attempts.ends_before_renewal(at),
    ]


def _due_filter(statuses: tuple[SubscriptionStatus, ...]) -> list[Any]:
    """The due scan at the bound instant `now` (`attempts.is_due` in SQL)."""
    now = bindparam("now")
    return [
        *_collectable(statuses, now),
        Subscription.next_charge_date <= now,
        (Subscription.retry_at.is_(None)) | (Subscription.retry_at <= now),
    ]


def next_due(
    session: Session,
    *,
    after: datetime | None = None,
    statuses: tuple[SubscriptionStatus, ...] = attempts.COLLECTABLE,
) -> datetime | None:
    """The first instant (after `after`, if given) at which a subscription enters the due
    scan: `_due_filter`'s clock terms turned around (its charge date, or its retry day when
    later). Before it a pass collects nothing, so the forecast need not run one."""
    params = {} if after is None else {"after": after}
    firsts = session.execute(_firsts(statuses, after is not None), params).one()
    return min((first for first in firsts if first is not None), default=None)


@functools.cache
def _firsts(statuses: tuple[SubscriptionStatus, ...], after: bool) -> Any:
    """next_due's statement, built once (the forecast asks after most ticks): a minimum over
    one column each, an index walk rather than a scan of every row, both in one statement."""
    by_date = (Subscription.retry_at.is_(None)) | (
        Subscription.retry_at <= Subscription.next_charge_date
    )
    queries = []
    for column, terms in (
        (Subscription.next_charge_date, [by_date]),
        # Said not null as well (implied): an index range that starts past the NULLs.
        (
            Subscription.retry_at,
            [
                Subscription.retry_at.is_not(None),
                Subscription.retry_at > Subscription.next_charge_date,
            ],
        ),
    ):
        # At the instant it comes due (the column): a notice in effect by then keeps it out
        # for good (it takes effect no later afterwards).
        query = select(func.min(column)).where(*_collectable(statuses, column), *terms)
        queries.append(query.where(column > bindparam("after")) if after else query)
    return select(*(query.scalar_subquery() for query in queries))


def _card_provider_organizations():
    return select(PaymentProviderConfig.organization_id).where(
        PaymentProviderConfig.active.is_(True),
        PaymentProviderConfig.provider == CARD_PROVIDER,
        PaymentProviderConfig.terminal.is_not(None),
    )


def due_by_organization(
    session: Session,
    *,
    now: datetime,
    statuses: tuple[SubscriptionStatus, ...] = attempts.COLLECTABLE,
    organizations: int | None = None,
) -> list[uuid.UUID]:
    """Organizations with due work, the longest-waiting first."""
    query = _by_organization(tuple(statuses), organizations is not None)
    return list(session.scalars(query, {"now": now, "organizations": organizations}))


def due_in(
    session: Session,
    organization_id: uuid.UUID,
    *,
    now: datetime,
    statuses: tuple[SubscriptionStatus, ...] = attempts.COLLECTABLE,
) -> list[uuid.UUID]:
    query = _due_in(tuple(statuses))
    return list(session.scalars(query, {"now": now, "organization_id": organization_id}))


def unevaluable(session: Session, *, now: datetime) -> int:
    """Organizations with due card-provider subscriptions but no usable terminal."""
    return session.scalar(_unevaluable(), {"now": now})


# The due scan's statements, built once (every pass of every minute asks them; building them
# cost more than running them on the embedded default).


@functools.cache
def _by_organization(statuses: tuple[SubscriptionStatus, ...], limited: bool) -> Any:
    query = (
        select(Subscription.organization_id)
        .where(*_due_filter(statuses))
        .where(Subscription.organization_id.in_(_card_provider_organizations()))
        .group_by(Subscription.organization_id)
        .order_by(func.min(Subscription.next_charge_date), Subscription.organization_id)
    )
    return query.limit(bindparam("organizations", type_=Integer)) if limited else query


@functools.cache
def _due_in(statuses: tuple[SubscriptionStatus, ...]) -> Any:
    return (
        select(Subscription.id)
        .where(Subscription.organization_id == bindparam("organization_id"))
        .where(*_due_filter(statuses))
        .order_by(Subscription.next_charge_date, Subscription.id)
    )


@functools.cache
def _unevaluable() -> Any:
    return select(func.count(func.distinct(Subscription.organization_id))).where(
        *_due_filter(attempts.COLLECTABLE),
        Subscription.organization_id.not_in(_card_provider_organizations()),
    )


# Every counter of a Summary (its int fields; `completed` is a bool, `alerts` a list).
COUNTS = tuple(name for name, value in dataclasses.asdict(Summary()).items() if type(value) is int)


def _merge(first: Summary, second: Summary) -> Summary:
    for name in COUNTS:
        setattr(first, name, getattr(first, name) + getattr(second, name))
    first.alerts.extend(second.alerts)
    first.completed = first.completed and second.completed
    return first
