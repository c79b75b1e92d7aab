"""Which plan pays a seat, and the session it spends (spec B 2.1: a plan holds "a period, quota
or credits"; spec B 3: "pack or drop-in past validity -> expired").

Only in a gym that requires a plan to book (plan_required_to_book). Among the member's plans
that cover the class (bookable, not ended, and valid when it starts), an unlimited one books
without spending; else the pack or drop-in with a session left whose period ends first spends
one (-1), recorded on the booking (bookings.subscription_id). A waitlisted booking spends too:
its seat is held, so its promotion asks nothing again. A seat kept when the unlimited plan
that paid it ends, because a pack covers the class, spends a session of that pack the same
way (book.give_up_uncovered, `paying_pack`). The session is given back (+1) when the
booking ends unused: cancelled before the class starts and before a check-in, or its class
cancelled, or still waitlisted when its waitlist closes (the class started or was cancelled:
attendance.close_waitlists); never for a no-show, an attended class or a confirmed booking
cancelled after the start. A revived booking that still records its plan (staff cancelled it
after a check-in) gives that session back before it spends one: it may book on the plan's
"last" session, which is its own.

A plan's period bounds the classes it books when the plan does not renew itself: a quota plan
(its validity), one without a renewal interval (a course, a gift: a fixed term), one on
pay-later terms, or a card plan the collector charges no more (its renewal end reached). A
renewing plan (card or cash, monthly) books the classes past its period end: it renews, and in
debt the grace rules of eligibility apply (spec B 4.3); under notice it renews no more and
books up to the notice's effective date. A renewing plan with a quota (8 classes a month) is
bounded by its period too: each renewal grants the quota again (billing.plans.refill_sessions),
so a class of the next period waits for it, and a session given back for a class of a period
renewed since lapsed with that period.

Locks in billing's fixed order (organization, membership, subscription, then session; see
book.py): the chosen plan's row is locked before the session's, by book() and by a cancel.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing.accounts import billing_settings
from gymctl.billing.plans import subscriptions_of
from gymctl.bookings import codes
from gymctl.bookings.eligibility import BOOKABLE, unstarted
from gymctl.db import is_postgres
from gymctl.errors import conflict
from gymctl.models import Booking, BookingStatus, ClassSession, Membership, Subscription
from gymctl.models.billing import CollectionMethod, PlanType


def _own_end(row: Subscription) -> datetime | None:
    """When the lifecycle ends the plan by itself (expired, gift_ended, term_ended: the rules of
    `lifecycle._term_over` and `_term_end`, read here per row), None while it renews (or rolls
    on, or lapses into debt instead): a quota (pack, drop-in) or a fixed term (no renewal
    interval) at its period end; on pay-later terms, one term; by the card provider, a priced
    plan with nothing left to charge (no next charge: its renewal end reached) or no card to
    charge (no saved card, no renewal ahead), and a free one that does not roll on (a fixed
    term); in cash, one that does not renew at the desk, or a free one, at its paid-through
    day. Other providers' and external billers' rows are theirs to end."""
    end = row.current_period_end
    if end is None:
        return None
    if row.sessions_remaining is not None or row.interval_months is None:
        return end
    method = row.payment_collection_method
    if method == CollectionMethod.pay_later:
        return end
    if method == CollectionMethod.card_provider:
        if row.price_in_cents == 0:
            rolls = row.plan_type == PlanType.card and row.open_ended and row.renewal_end is None
            return None if rolls else end
        no_card = row.payment_method_id is None and (
            row.renewal_end is None or row.renewal_end <= end
        )
        return end if row.next_charge_date is None or no_card else None
    if method == CollectionMethod.cash:
        paid_through = row.cash_prepaid_through or end
        renews = row.plan_type == PlanType.cash or (
            row.plan_type == PlanType.card
            and row.open_ended
            and (row.renewal_end is None or row.renewal_end > paid_through)
        )
        return paid_through if row.price_in_cents == 0 or not renews else None
    return None


def covered_until(row: Subscription) -> datetime | None:
    """The last instant a class of the plan may start, None when it renews without end: when
    the lifecycle ends it by itself (`_own_end`), and a notice's effective date (a plan under
    notice renews no more: the period-end sweep cancels it then), whichever comes first."""
    ends = []
    own = _own_end(row)
    if own is not None:
        ends.append(own)
    if row.cancel_at_period_end and row.cancellation_effective_at is not None:
        ends.append(row.cancellation_effective_at)
    return min(ends) if ends else None


def covers(row: Subscription, starts_at: datetime) -> bool:
    """The plan is live and valid when the class starts: not before its term began (a desk
    sale before the gym's opening day starts on it) and not past its end (a class starting at
    the very end of its validity is the last one it covers)."""
    if row.status not in BOOKABLE or unstarted(row):
        return False  # a presale in debt after its declined opening charge holds no quota
    if row.started_at is not None and starts_at < row.started_at:
        return False
    if row.ended_at is not None or row.deleted_at is not None:
        return False
    end = covered_until(row)
    return end is None or starts_at <= end


def pays(row: Subscription, starts_at: datetime, spent: uuid.UUID | None) -> bool:
    """The plan covers a seat in a class at `starts_at` and pays for it: unlimited, the quota
    plan the seat spent, or one with a session left. A used-up pack covers the class and pays
    for no seat (a booking now is refused plan_sessions_used_up)."""
    if not covers(row, starts_at):
        return False
    return row.sessions_remaining is None or row.id == spent or row.sessions_remaining > 0


def paid_without_spending(plans, starts_at: datetime, spent: uuid.UUID | None) -> bool:
    """One of `plans` pays a seat at `starts_at` with nothing more spent: an unlimited plan
    that covers the class, or the quota plan the seat spent, still covering it."""
    return any(
        covers(row, starts_at) and (row.sessions_remaining is None or row.id == spent)
        for row in plans
    )


def paying_pack(plans, starts_at: datetime) -> Subscription | None:
    """The quota plan that pays a seat at `starts_at` which no plan pays any more (its
    unlimited plan ended: book.give_up_uncovered), as plan_for_seat would choose it: one that
    covers the class, with a session left, whose cover ends first. Rows locked by the caller."""
    left = [
        row
        for row in plans
        if row.sessions_remaining is not None
        and row.sessions_remaining > 0
        and covers(row, starts_at)
    ]
    return min(left, key=_order, default=None)


def _order(row: Subscription) -> tuple:
    """Unlimited first; then the quota plan whose cover ends first (one without an end last).
    Rows tie on the first two terms only with ends of one kind: all datetimes, or all None."""
    end = covered_until(row)
    return (row.sessions_remaining is not None, end is None, end or 0, str(row.id))


def lock_plan(session: Session, subscription_id: uuid.UUID) -> Subscription | None:
    """The plan's row lock, read fresh under it, after its membership's (shared, as book()
    holds it). On the embedded default the write transaction already holds the database's one
    write lock: the row is only read again."""
    if is_postgres(session):
        membership_id = session.scalar(
            select(Subscription.membership_id).where(Subscription.id == subscription_id)
        )
        if membership_id is None:
            return None
        session.scalar(
            select(Membership.id).where(Membership.id == membership_id).with_for_update(read=True)
        )
    return session.scalar(
        select(Subscription)
        .where(Subscription.id == subscription_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def plan_for_seat(
    session: Session,
    organization_id: uuid.UUID,
    user_id: uuid.UUID,
    row: ClassSession,
    *,
    held: uuid.UUID | None = None,
) -> Subscription | None:
    """The plan that pays a seat in `row`, locked; None when the gym books without plans.
    Raises 409 plan_ends_before_session when no plan covers the class, 409
    plan_sessions_used_up when those that do have no session left. `held`: the plan whose
    session the revived booking still records (given back before `spend`): it counts as one
    left. Spends nothing: `spend`."""

    def left(plan: Subscription) -> bool:
        extra = 1 if plan.id == held else 0
        return plan.sessions_remaining is None or plan.sessions_remaining + extra > 0

    if not billing_settings(session, organization_id).plan_required_to_book:
        return None
    rows = subscriptions_of(session, organization_id, user_id)
    live = [
        sub
        for sub in rows
        if sub.status in BOOKABLE and sub.ended_at is None and not unstarted(sub)
    ]
    covering = sorted((sub for sub in live if covers(sub, row.starts_at)), key=_order)
    for candidate in covering:
        if not left(candidate):
            continue
        # Read again under its lock: a booking that spent its last session meanwhile, or the
        # lifecycle that ended it, committed first.
        locked = lock_plan(session, candidate.id)
        if locked is None or not covers(locked, row.starts_at):
            continue
        if left(locked):
            return locked
    if not covering:
        ends = [end for end in map(covered_until, live) if end is not None]
        raise conflict(
            codes.PLAN_ENDS_BEFORE_SESSION,
            "your plan is not valid when this class starts",
            planEndsAt=max(ends).isoformat() if ends else None,
        )
    raise conflict(codes.PLAN_SESSIONS_USED_UP, "your plan has no sessions left")


def refuse_if_used_up(plan: Subscription) -> None:
    """409 plan_sessions_used_up when the locked plan has no session left to spend."""
    if plan.sessions_remaining is not None and plan.sessions_remaining <= 0:
        raise conflict(codes.PLAN_SESSIONS_USED_UP, "your plan has no sessions left")


def still_covered(session: Session, booking: Booking, row: ClassSession) -> bool:
    """A plan of the member still pays for the waitlisted booking's class (always, where the
    gym books without plans): its plan may have come under notice or ended since it waited,
    and booking now would be refused plan_ends_before_session (or plan_sessions_used_up). Read
    unlocked, as the eligibility rules a promotion asks are; its session, if it spent one,
    stays spent."""
    if not billing_settings(session, booking.organization_id).plan_required_to_book:
        return True
    rows = subscriptions_of(session, booking.organization_id, booking.user_id)
    return any(pays(sub, row.starts_at, booking.subscription_id) for sub in rows)


def spend(booking: Booking, plan: Subscription | None, *, now: datetime) -> None:
    """The booking takes a session of `plan` (its row locked by plan_for_seat); an unlimited
    plan, or none, spends nothing and is not recorded."""
    if plan is None or plan.sessions_remaining is None:
        booking.subscription_id = None
        return
    plan.sessions_remaining -= 1
    plan.updated_at = now
    booking.subscription_id = plan.id


def gives_back(booking: Booking, row: ClassSession, *, now: datetime) -> bool:
    """The booking ends unused: its class cancelled (only before it starts: a check-in at the
    door, which opens an hour earlier, used nothing), still waitlisted (it never had a seat),
    or it ends before the class starts and before a check-in (a seat used, or one past its
    start, is spent)."""
    if booking.subscription_id is None:
        return False
    if row.cancelled_at is not None:
        return True
    if booking.checked_in_at is not None:
        return False
    return booking.status == BookingStatus.waitlisted or row.starts_at > now


def give_back(
    session: Session, booking: Booking, row: ClassSession, *, now: datetime
) -> uuid.UUID | None:
    """+1 on the plan the booking spent (whatever became of the plan since), and the booking
    no longer records it: a session is given back once. The plan's id, or None. A class before
    the plan's current period (or at its very start: the last instant the period before
    covered) spent the quota of a period renewed since, which lapsed with it
    (plans.refill_sessions): the booking lets go of it, and nothing comes back. A first period
    has none before it (a desk term from the gym's opening day: a class at that instant)."""
    subscription_id = booking.subscription_id
    booking.subscription_id = None
    plan = lock_plan(session, subscription_id) if subscription_id else None
    if plan is None or plan.sessions_remaining is None:
        return None
    renewed = plan.current_period_start is not None and plan.current_period_start != (
        plan.started_at
    )
    if renewed and row.starts_at <= plan.current_period_start:
        return None
    plan.sessions_remaining += 1
    plan.updated_at = now
    return plan.id


def lock_plans_of_session(session: Session, class_session_id: uuid.UUID) -> None:
    """Lock the plans the session's bookings spent, before the session's own lock is taken
    (billing's order): a class cancelled gives each of them a session back, the active
    bookings' and the ones ended after a check-in (`give_back_kept`)."""
    ids = session.scalars(
        select(Booking.subscription_id)
        .where(
            Booking.class_session_id == class_session_id,
            Booking.subscription_id.is_not(None),
        )
        .distinct()
        .order_by(Booking.subscription_id)
    ).all()
    for subscription_id in ids:
        lock_plan(session, subscription_id)


def give_back_kept(session: Session, row: ClassSession, *, now: datetime) -> int:
    """A cancelled class's sessions that its ended bookings kept: a seat staff cancelled or
    removed after its check-in at the door counted as used, but the class never took place
    (gives_back), and the row can never be revived into it. Called once the active bookings
    are cancelled (theirs came back then); the plans are locked (lock_plans_of_session). How
    many came back."""
    kept = session.scalars(
        select(Booking)
        .where(Booking.class_session_id == row.id, Booking.subscription_id.is_not(None))
        .order_by(Booking.id)
    ).all()
    return sum(give_back(session, booking, row, now=now) is not None for booking in kept)


def lock_plans_waiting(session: Session, ended) -> None:
    """Lock the plans spent by bookings still waitlisted in the sessions `ended` (session ids,
    or a select of them) whose waitlist closes, before any session's lock is taken (billing's
    order)."""
    ids = session.scalars(
        select(Booking.subscription_id)
        .where(
            Booking.class_session_id.in_(ended),
            Booking.status == BookingStatus.waitlisted,
            Booking.deleted_at.is_(None),
            Booking.subscription_id.is_not(None),
        )
        .distinct()
        .order_by(Booking.subscription_id)
    ).all()
    for subscription_id in ids:
        lock_plan(session, subscription_id)
