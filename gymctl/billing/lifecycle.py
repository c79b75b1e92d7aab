"""The hourly lifecycle pass (spec B 3): every subscription transition the table gives to the
lifecycle, each as one set-based statement on PostgreSQL (`gymctl.billing.transitions`).

Each transition moves a row out of the state its condition reads, so a second run at the same
`now` changes nothing and writes nothing. The order matters: debt is entered before anything
ends (an unpaid pay-later pack owes its debt rather than quietly expiring), and cancellation for
non-payment runs after debt entry, so a row that enters debt already past its grace is
cancelled in the same pass rather than by the next one. A notice running on a plan cancelled
for non-payment ends with it in the pass (gymctl.retention.overtaken); one that took effect by
the grace's end is left to the period-end sweep, which settles it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Uuid,
    and_,
    bindparam,
    case,
    cast,
    exists,
    extract,
    func,
    literal,
    not_,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from gymctl.billing import attempts, plans
from gymctl.billing.days import day_n_ends, months_later
from gymctl.billing.debt import CASH_LAPSED, NOTICE_CANCELLED, NOTICE_OPENED, PAYMENT_DUE
from gymctl.billing.transitions import (
    NON_PAYMENT,
    S,
    Transition,
    run_transition,
)
from gymctl.bookings import book
from gymctl.bridge import mirror
from gymctl.clock import add_months, ensure_utc
from gymctl.db import is_postgres
from gymctl.models import (
    BillingSettings,
    Checkout,
    Membership,
    PaymentTransaction,
    Subscription,
)
from gymctl.models.base import UTCDateTime
from gymctl.models.billing import (
    CheckoutStatus,
    CollectionMethod,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
)
from gymctl.retention.overtaken import PRESALE_CHARGE_FAILED, end_overtaken_notice

# At most this many rows per transition per run; the rest waits for the next hour (`more` in
# the summary names the transitions that left rows behind). 10,000 rows keep each statement's
# row locks to well under a second on PostgreSQL.
MAX_ROWS_PER_TRANSITION = 10_000

_PT = PaymentTransaction.__table__
_CHECKOUTS = Checkout.__table__
_SETTINGS = BillingSettings.__table__
_DEFAULT_GRACE_DAYS = _SETTINGS.c.billing_grace_days.default.arg  # spec B 2.5: 7


def no_unresolved_attempt() -> ColumnElement[bool]:
    """A pending protected attempt means the outcome is unknown, not that nothing was charged
    (spec B 2.2): the row waits until the collector resolves it (the period-end sweep waits
    the same way: `settlement.matured`). Pending attempts are few, so
    PostgreSQL probes them as one hashed set (an anti-join was misplanned as a loop)."""
    return S.c.id.not_in(
        select(_PT.c.subscription_id).where(
            _PT.c.status == TransactionStatus.pending.value,
            _PT.c.attempt_kind.is_not(None),
            _PT.c.subscription_id.is_not(None),  # NOT IN over a NULL matches nothing
        )
    )


def _live(status: SubscriptionStatus, *conditions: ColumnElement[bool]) -> ColumnElement[bool]:
    return and_(
        S.c.status == status.value, S.c.deleted_at.is_(None), *conditions, no_unresolved_attempt()
    )


def _ending(
    own_end: ColumnElement[datetime], *conditions: ColumnElement[bool]
) -> ColumnElement[bool]:
    """Active rows whose term is over. A notice that takes effect by the plan's own end is left
    to the period-end sweep, which sets its retention outcome and settles the refund owed (spec
    B 3). One effective after it never matured first: the plan ends at its own end, and the
    notice ends with it, overtaken, owing no refund (`_end_overtaken_notices`); before, the plan
    stayed active past its end until the notice matured, then settled 0 days."""
    return _live(SubscriptionStatus.active, not_(_notice_by(own_end)), *conditions)


def _notice_by(instant: ColumnElement[datetime]) -> ColumnElement[bool]:
    """A notice given that takes effect at or before `instant`."""
    return and_(
        S.c.cancel_at_period_end.is_(true()),
        S.c.cancellation_effective_at.is_not(None),
        S.c.cancellation_effective_at <= instant,
    )


# Subscriptions with their organization's billing settings (absent row: the defaults), joined
# once rather than looked up per debt row.
_WITH_SETTINGS = S.outerjoin(_SETTINGS, _SETTINGS.c.organization_id == S.c.organization_id)
# The gym's time zone, read from `_WITH_SETTINGS` (no settings row: UTC).
_GYM_ZONE = func.coalesce(_SETTINGS.c.timezone, "UTC")


def _grace_ends() -> ColumnElement[datetime]:
    """When day N (billing_grace_days, default 7, counted from debt_since) has passed: the
    organization's midnight that ends it (`gymctl.billing.days`). Reads the settings of
    `_WITH_SETTINGS`."""
    grace = func.coalesce(_SETTINGS.c.billing_grace_days, _DEFAULT_GRACE_DAYS)
    return day_n_ends(S.c.debt_since, grace, _GYM_ZONE)


# A zero-price open-ended card plan rolls on instead of ending (spec B 3). A card plan only: a
# cash plan renews by a payment at the desk, and a free one, owing none, ends its term.
_ROLLS = and_(
    S.c.plan_type == PlanType.card.value,
    S.c.price_in_cents == 0,
    S.c.open_ended.is_(true()),
    S.c.renewal_end.is_(None),
    S.c.interval_months.is_not(None),
)


# A plan paid in cash renews when the member owes its next period: a cash plan always, a card
# plan sold for cash while it is open-ended with no renewal end reached by its paid-through day.
_RENEWS_IN_CASH = or_(
    S.c.plan_type == PlanType.cash.value,
    and_(
        S.c.plan_type == PlanType.card.value,
        S.c.interval_months.is_not(None),
        S.c.open_ended.is_(true()),
        or_(S.c.renewal_end.is_(None), S.c.renewal_end > S.c.cash_prepaid_through),
    ),
)


def _term_over(now: datetime) -> ColumnElement[bool]:
    """A card or cash plan's term is over, however it was paid (spec B 3, term_ended): by the
    card provider with no card to renew it and no renewal ahead, or with nothing left for the
    collector to charge (no next charge: `grant_period` sets none from the last renewal on, or
    without an interval; or a zero price, which it never charges: a free plan of a fixed term
    bought online saved a card and was given a next charge by its grant, and stayed active on
    a period long over), a saved card or not (an open-ended free one without a renewal end
    rolls instead); in cash with no renewal or at zero price (a priced renewing one lapses
    into debt instead); on pay-later terms once paid (one term). Rows of other providers or
    external billers are theirs to end: their card is not ours to see."""
    return or_(
        and_(
            S.c.payment_collection_method == CollectionMethod.card_provider.value,
            S.c.current_period_end <= now,
            or_(
                S.c.next_charge_date.is_(None),
                S.c.price_in_cents == 0,
                and_(
                    S.c.payment_method_id.is_(None),
                    or_(S.c.renewal_end.is_(None), S.c.renewal_end <= now),
                ),
            ),
        ),
        and_(
            S.c.payment_collection_method == CollectionMethod.cash.value,
            func.coalesce(S.c.cash_prepaid_through, S.c.current_period_end) <= now,
            or_(S.c.price_in_cents == 0, not_(_RENEWS_IN_CASH)),
        ),
        and_(
            S.c.payment_collection_method == CollectionMethod.pay_later.value,
            S.c.unpaid_amount_in_cents == 0,
            S.c.current_period_end <= now,
        ),
    )


def _term_end() -> ColumnElement[datetime]:
    """When `_term_over` ends a card plan's term: in cash its paid-through day; by the card
    provider with a charge still ahead (a next charge at a price), the later of its period end
    and its renewal end; else its period end."""
    return case(
        (
            S.c.payment_collection_method == CollectionMethod.cash.value,
            func.coalesce(S.c.cash_prepaid_through, S.c.current_period_end),
        ),
        (
            and_(
                S.c.payment_collection_method == CollectionMethod.card_provider.value,
                S.c.next_charge_date.is_not(None),
                S.c.price_in_cents > 0,
                S.c.renewal_end > S.c.current_period_end,
            ),
            S.c.renewal_end,
        ),
        else_=S.c.current_period_end,
    )


def _opened_debt(reason: str, since, amount) -> Callable[[datetime, Any], dict[str, Any]]:
    def values(now: datetime, _picked: Any = None) -> dict[str, Any]:
        return {
            "status": SubscriptionStatus.debt.value,
            "debt_reason": reason,
            "debt_since": since,
            "debt_amount_in_cents": amount,
            "updated_at": now,
        }

    return values


def _ended(status: SubscriptionStatus) -> Callable[[datetime, Any], dict[str, Any]]:
    def values(now: datetime, _picked: Any = None) -> dict[str, Any]:
        return {"status": status.value, "ended_at": now, "updated_at": now}

    return values


def _cancelled(now: datetime, _picked: Any = None) -> dict[str, Any]:
    # The debt columns stay: open debt on a plan cancelled for non-payment blocks booking.
    return {
        "status": SubscriptionStatus.cancelled.value,
        "cancellation_reason": NON_PAYMENT,
        "retention_outcome": "lost_payment",
        "cancelled_at": now,
        "ended_at": now,
        "updated_at": now,
    }


def _roll_picks(now: datetime) -> dict[str, ColumnElement[Any]]:
    """How many whole intervals the roll advances: the fewest that end the period after `now`,
    counted from the old end on the gym's calendar (month ends clamp, as `clock.add_months`
    does on the embedded default). The calendar months between the two instants' local dates
    give a first guess that is exact or one short. And the zone, for the new values."""
    end, now_local = (
        func.timezone(_GYM_ZONE, S.c.current_period_end),
        func.timezone(_GYM_ZONE, literal(now, UTCDateTime())),
    )
    months = cast(
        (extract("year", now_local) - extract("year", end)) * 12
        + extract("month", now_local)
        - extract("month", end),
        Integer,
    )
    first = func.greatest(1, (months + S.c.interval_months - 1) // S.c.interval_months)
    shifted = months_later(S.c.current_period_end, first * S.c.interval_months, _GYM_ZONE)
    return {"intervals": first + case((shifted <= now, 1), else_=0), "zone": _GYM_ZONE}


def _rolled_pg(now: datetime, picked) -> dict[str, Any]:
    def shifted(intervals):
        return months_later(S.c.current_period_end, intervals * S.c.interval_months, picked.zone)

    new_end = shifted(picked.intervals)
    return {
        "current_period_start": shifted(picked.intervals - 1),
        "current_period_end": new_end,
        "next_charge_date": case((S.c.next_charge_date.is_(None), None), else_=new_end),
        "sessions_remaining": plans.refilled_sessions(),
        "updated_at": now,
    }


def _rolled_embedded(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    end, months, zone = row["current_period_end"], row["interval_months"], row["zone"]
    intervals = 1
    while add_months(end, intervals * months, zone) <= now:
        intervals += 1
    new_end = add_months(end, intervals * months, zone)
    return {
        "current_period_start": add_months(end, (intervals - 1) * months, zone),
        "current_period_end": new_end,
        "next_charge_date": None if row["next_charge_date"] is None else new_end,
        "sessions_remaining": plans.refilled_sessions(),
        "updated_at": now,
    }


def _debt_payload(row) -> dict[str, Any]:
    return {
        "reason": row.debt_reason,
        "amountInCents": row.debt_amount_in_cents,
        "currency": row.currency,
        "since": row.debt_since,
        "userId": row.user_id,
    }


def _cancelled_payload(row) -> dict[str, Any]:
    return {
        "reason": NON_PAYMENT,
        "debtReason": row.debt_reason,
        "debtAmountInCents": row.debt_amount_in_cents,
        "currency": row.currency,
        "debtSince": row.debt_since,
        "userId": row.user_id,
    }


def _ended_payload(row) -> dict[str, Any]:
    return {"planType": row.plan_type, "periodEnd": row.current_period_end, "userId": row.user_id}


def _rolled_payload(row) -> dict[str, Any]:
    return {
        "periodStart": row.current_period_start,
        "periodEnd": row.current_period_end,
        "amountInCents": 0,
        "userId": row.user_id,
    }


def _pay_later_due(now: datetime) -> tuple[ColumnElement[bool], ...]:
    """A pay-later balance unpaid past its due day."""
    return (
        S.c.payment_collection_method == CollectionMethod.pay_later.value,
        S.c.unpaid_amount_in_cents > 0,
        S.c.payment_due_at <= now,
    )


# The statuses a plan ends in (a term over, a notice matured, a removal, non-payment).
ENDED = (
    SubscriptionStatus.expired,
    SubscriptionStatus.gift_ended,
    SubscriptionStatus.term_ended,
    SubscriptionStatus.cancelled,
)

# The ending steps that end a plan at its own end, by the status they end it in.
_OWN_ENDS = {
    "expired": SubscriptionStatus.expired,
    "gift_ended": SubscriptionStatus.gift_ended,
    "term_ended": SubscriptionStatus.term_ended,
}


TRANSITIONS: tuple[Transition, ...] = (
    Transition(
        "cash_lapsed",
        lambda now: _live(
            SubscriptionStatus.active,
            S.c.payment_collection_method == CollectionMethod.cash.value,
            _RENEWS_IN_CASH,
            # Implied by _RENEWS_IN_CASH, said apart so an index led by the plan type finds
            # the rows (the OR it is in hides the type from an index): the drop-ins and gifts
            # paid in cash, whose paid-through day lies behind them, are not walked.
            S.c.plan_type.in_((PlanType.cash.value, PlanType.card.value)),
            S.c.price_in_cents > 0,
            S.c.cash_prepaid_through <= now,
            # A notice effective by the paid-through day ends the plan before the month it
            # would owe: the period-end sweep ends it (an hourly pass ran first and opened a
            # month's debt for a plan the member had cancelled).
            not_(_notice_by(S.c.cash_prepaid_through)),
        ),
        _opened_debt(CASH_LAPSED, S.c.cash_prepaid_through, S.c.price_in_cents),
        "subscription.debt_opened",
        _debt_payload,
        S.c.cash_prepaid_through,
        notice=NOTICE_OPENED,
    ),
    Transition(
        "payment_due",
        lambda now: _live(SubscriptionStatus.active, *_pay_later_due(now)),
        lambda now, _picked=None: {
            **_opened_debt(PAYMENT_DUE, S.c.payment_due_at, S.c.unpaid_amount_in_cents)(now),
            "payment_last_day": func.coalesce(S.c.payment_last_day, S.c.payment_due_at),
        },
        "subscription.debt_opened",
        _debt_payload,
        S.c.payment_due_at,
        notice=NOTICE_OPENED,
    ),
    Transition(
        "payment_due_ended",
        # A term sold on pay-later terms owes its balance from its due day even when it ended
        # first (a pack's validity, a notice, a removal): the balance was never owed at all.
        # It stays ended, owing (as a plan cancelled for non-payment does): the desk takes
        # it, and its grace blocks booking. A step of its own: in one look with the running
        # terms, the hourly look read every row (an index serves each apart).
        lambda now: and_(
            S.c.status.in_([status.value for status in ENDED]),
            S.c.deleted_at.is_(None),
            S.c.debt_since.is_(None),
            *_pay_later_due(now),
        ),
        lambda now, _picked=None: {
            "debt_reason": PAYMENT_DUE,
            "debt_since": S.c.payment_due_at,
            "debt_amount_in_cents": S.c.unpaid_amount_in_cents,
            "payment_last_day": func.coalesce(S.c.payment_last_day, S.c.payment_due_at),
            "updated_at": now,
        },
        "subscription.debt_opened",
        _debt_payload,
        S.c.payment_due_at,
        notice=NOTICE_OPENED,
    ),
    Transition(
        "cancelled",
        lambda now: _live(
            SubscriptionStatus.debt,
            S.c.debt_since.is_not(None),
            _grace_ends() <= now,
            # A notice that took effect by the grace's end ended the plan first: the period-end
            # sweep settles it, whichever job runs first. A later one is overtaken (below).
            not_(_notice_by(_grace_ends())),
        ),
        _cancelled,
        "subscription.cancelled",
        _cancelled_payload,
        S.c.debt_since,
        source=_WITH_SETTINGS,
        notice=NOTICE_CANCELLED,
    ),
    Transition(
        "expired",
        lambda now: _ending(
            S.c.current_period_end,
            # A course has a validity too (spec B names the type, no row of its own): no step
            # ended one, so it stayed active for ever past its last day.
            S.c.plan_type.in_((PlanType.pack.value, PlanType.drop_in.value, PlanType.course.value)),
            S.c.current_period_end <= now,
        ),
        _ended(SubscriptionStatus.expired),
        "subscription.expired",
        _ended_payload,
        S.c.current_period_end,
    ),
    Transition(
        "gift_ended",
        lambda now: _ending(
            S.c.current_period_end,
            S.c.plan_type == PlanType.gift.value,
            S.c.current_period_end <= now,
        ),
        _ended(SubscriptionStatus.gift_ended),
        "subscription.gift_ended",
        _ended_payload,
        S.c.current_period_end,
    ),
    Transition(
        "term_ended",
        lambda now: _ending(
            _term_end(),
            # A cash plan too: sold on pay-later terms and paid, or free in cash, nothing lapses
            # into debt (cash_lapsed reads a price paid in cash), so it stayed active for ever.
            S.c.plan_type.in_((PlanType.card.value, PlanType.cash.value)),
            _term_over(now),
            not_(_ROLLS),
        ),
        _ended(SubscriptionStatus.term_ended),
        "subscription.term_ended",
        _ended_payload,
        S.c.current_period_end,
    ),
    Transition(
        "rolled",
        # With or without a saved card (a free plan bought online saved one): the collector
        # never charges a zero price, so nothing else moves its period on.
        lambda now: _ending(
            S.c.current_period_end,
            _ROLLS,
            S.c.current_period_end <= now,
        ),
        _rolled_pg,
        "subscription.renewed",
        _rolled_payload,
        S.c.current_period_end,
        source=_WITH_SETTINGS,
        picks=_roll_picks,
        embedded_values=_rolled_embedded,
        embedded_reads=(_GYM_ZONE.label("zone"),),
    ),
)


def ends_by_itself(now: datetime) -> ColumnElement[bool]:
    """The rows the pass's own ends (expired, gift_ended, term_ended, rolled) move at `now`:
    any notice on one takes effect after the plan's own end, so the pass ends it (or rolls it
    on), not the period-end sweep, which leaves them (`settlement.matured`): after an outage
    the outcome does not depend on which job runs first. Their own conditions, not a copy."""
    return or_(*(t.where(now) for t in TRANSITIONS if t.name in (*_OWN_ENDS, "rolled")))


# Free presales whose opening day has come: bought (their page completed, the card saved),
# still scheduled. Oldest opening first, at most `limit` a run.
_FREE_PRESALES_OPENING = (
    select(S.c.id)
    .where(
        S.c.status == SubscriptionStatus.scheduled.value,
        S.c.deleted_at.is_(None),
        S.c.price_in_cents == 0,
        S.c.opening_day <= bindparam("now"),
        exists().where(
            _CHECKOUTS.c.subscription_id == S.c.id,
            _CHECKOUTS.c.status == CheckoutStatus.completed.value,
        ),
    )
    .order_by(S.c.opening_day, S.c.id)
    .limit(bindparam("limit", type_=Integer))
)


def open_free_presales(session: Session, *, now: datetime, limit: int) -> tuple[int, bool]:
    """A presale is opened by its opening day's charge; a free one has nothing to charge, so
    the pass opens it then, with the period, quota and activation a paid opening is granted
    (`attempts.grant_period`, the same function). Rows opened, and whether more wait."""
    picked = session.scalars(_FREE_PRESALES_OPENING, {"now": now, "limit": limit + 1}).all()
    opened = 0
    for subscription_id in picked[:limit]:
        # Like the transitions, a row another worker holds waits for the next pass; one that
        # changed since it was picked (withdrawn, say) is no longer a presale to open.
        subscription = attempts.lock_subscription(session, subscription_id, skip_locked=True)
        if subscription is None or subscription.status != SubscriptionStatus.scheduled:
            continue
        attempts.grant_period(session, subscription, now=now)
        subscription.updated_at = now
        opened += 1
    session.flush()
    return opened, len(picked) > limit


@functools.cache
def _anything_due() -> Any:
    """Whether any step of the pass would move a row at `now`: one statement, so that an hour
    with nothing to do (most of them; the forecast runs thousands) costs one look rather than
    a statement per step. The steps' own conditions, not a second copy of them."""
    return select(
        or_(
            _FREE_PRESALES_OPENING.order_by(None).limit(None).exists(),
            *(exists().select_from(t.source).where(t.where(bindparam("now"))) for t in TRANSITIONS),
        )
    )


def _nothing_moved() -> dict[str, Any]:
    summary = {"opened": 0, **{t.name: 0 for t in TRANSITIONS}, "events": 0, "more": []}
    return {**summary, "seatsGivenUp": 0}


def run_lifecycle(
    session: Session, *, now: datetime, limit: int = MAX_ROWS_PER_TRANSITION
) -> dict[str, Any]:
    """Open the free presales whose day has come, then run every lifecycle transition once at
    `now`; the counts moved per step, the events written, and `more`: the steps that hit
    `limit` and left rows for next time. Opening first: a presale opened late (after an
    outage) whose first period is already over rolls on in the same pass. When no step has
    a row to move, the pass ends after one look (`_anything_due`).

    Works in the caller's transaction. After a pass that ran its steps, the subscription rows
    the session holds are expired, so they read their new state (after one look that found
    nothing, nothing changed)."""
    now = ensure_utc(now)
    session.flush()
    if not session.scalar(_anything_due(), {"now": now}):
        return _nothing_moved()
    held = _lock_members_first(session, now=now, limit=limit)
    opened, left = open_free_presales(session, now=now, limit=limit)
    summary: dict[str, Any] = {"opened": opened}
    events = opened  # each opening writes membership.activated
    more: list[str] = ["opened"] if left else []
    for transition in TRANSITIONS:
        moved = run_transition(session, _only_held(transition, held), now, limit)
        summary[transition.name] = moved.rows
        events += moved.events
        if moved.more:
            more.append(transition.name)
    session.expire_all()
    seats = 0
    if any(summary[name] for name in ("cancelled", *_OWN_ENDS)):
        events += _end_overtaken_notices(session, now=now)
        seats = _give_up_seats(session, held, now=now)
    mirror.subscriptions_moved(session, now=now)
    return {**summary, "events": events, "more": more, "seatsGivenUp": seats}


# The steps that end a plan (its seats to come are given up, `_give_up_seats`), and those that
# open a debt the pass may cancel for non-payment in the same run.
_ENDS = ("cancelled", *_OWN_ENDS)
_MAY_END = ("cash_lapsed", "payment_due", *_ENDS)
_REQUIRED = _SETTINGS.alias("required")  # apart from _WITH_SETTINGS's own join


def _plan_required(organization_id: Any) -> ColumnElement[bool]:
    return exists().where(
        _REQUIRED.c.organization_id == organization_id,
        _REQUIRED.c.plan_required_to_book.is_(True),
    )


def _among(column: Any, held: frozenset) -> ColumnElement[bool]:
    """`column` is one of `held`: one array parameter, however many (PostgreSQL takes 65,535
    parameters in a statement)."""
    return column == func.any(literal(sorted(held), postgresql.ARRAY(Uuid())))


def _lock_members_first(session: Session, *, now: datetime, limit: int) -> frozenset | None:
    """Billing's lock order (spec B 4.1: organization, membership, subscription, then a
    class session) for the seats the pass gives up: the steps lock the plans they move, and a
    seat given up needs its member's membership, the plans it spent, the members waiting in
    its class, then the class. Taken after the plans, a removal holding the membership and
    waiting for the plan (or for a class the pass held) deadlocked with the pass. So, before
    any plan's lock and in one id order: the memberships of the rows the ending steps (and
    the debt steps before them) may move, at most `limit` a step, in gyms that require a plan
    to book, and the members waiting in the classes they hold seats in; shared, as a booking
    holds them. The ids held; None on the embedded default (one writer, no row locks)."""
    if not is_postgres(session):
        return None
    candidates = union_all(
        *(
            select(S.c.membership_id.label("id"))
            .select_from(t.source)
            .where(t.where(now), _plan_required(S.c.organization_id))
            .order_by(t.oldest_first, S.c.id)
            .limit(limit)
            for t in TRANSITIONS
            if t.name in _MAY_END
        )
    ).subquery()
    waiting = attempts.waiting_in_classes_of(select(candidates.c.id), now)
    held = session.scalars(
        select(Membership.id)
        .where(or_(Membership.id.in_(select(candidates.c.id)), Membership.id.in_(waiting)))
        .order_by(Membership.id)
        .with_for_update(read=True)
    ).all()
    return frozenset(held)


def _only_held(transition: Transition, held: frozenset | None) -> Transition:
    """An ending step moves, in a gym that requires a plan to book, only the plans whose
    membership the pass holds: one that came due since (or beyond the first `limit`) waits
    for the next pass, as a row another worker holds does."""
    if held is None or transition.name not in _ENDS:
        return transition
    where = transition.where
    return dataclasses.replace(
        transition,
        where=lambda now: and_(
            where(now),
            or_(_among(S.c.membership_id, held), not_(_plan_required(S.c.organization_id))),
        ),
    )


def _give_up_seats(session: Session, held: frozenset | None, *, now: datetime) -> int:
    """The seats to come of the plans this pass ended that no other plan covers are given up
    in its transaction (`bookings.book.give_up_uncovered`), in gyms that require a plan to
    book, all of them in one call: every lock before the first class's. On PostgreSQL those of
    the members the pass locked first (`_lock_members_first`), which are all of them unless
    the gym came to require a plan during the pass. The seats given up."""
    query = (
        select(Subscription)
        .join(BillingSettings, BillingSettings.organization_id == Subscription.organization_id)
        .where(
            Subscription.status.in_(ENDED),
            Subscription.ended_at == now,
            BillingSettings.plan_required_to_book.is_(True),
        )
        .order_by(Subscription.membership_id, Subscription.id)
    )
    if held is not None:
        query = query.where(_among(Subscription.membership_id, held))
    return book.give_up_uncovered(session, *session.scalars(query).all(), now=now)


def _end_overtaken_notices(session: Session, *, now: datetime) -> int:
    """A notice still running on a plan this pass ended ends with it, in the pass's
    transaction (`overtaken.end_overtaken_notice`): cancelled for non-payment, its case closes
    lost_payment; ended at its own end before the notice took effect, lost_contacted or
    lost_no_contact, the ending (expired, gift_ended, term_ended) its reason in place of the
    notice's (which the notice row keeps). A presale charge-failure case of such a plan closes
    the same way, notice or none (`overtaken.close_with_plan`). The audit events written."""
    rows = session.scalars(
        select(Subscription)
        .where(
            or_(
                and_(
                    Subscription.status == SubscriptionStatus.cancelled,
                    Subscription.cancellation_reason == NON_PAYMENT,
                    Subscription.cancelled_at == now,
                ),
                and_(
                    Subscription.status.in_(tuple(_OWN_ENDS.values())),
                    Subscription.ended_at == now,
                ),
            ),
            or_(
                Subscription.cancel_at_period_end.is_(True),
                Subscription.retention_case_kind == PRESALE_CHARGE_FAILED,
            ),
        )
        .order_by(Subscription.id)
    ).all()
    for row in rows:
        if row.cancel_at_period_end and row.status != SubscriptionStatus.cancelled:
            row.cancellation_reason = row.status.value
    return sum(end_overtaken_notice(session, row, now=now) for row in rows)
