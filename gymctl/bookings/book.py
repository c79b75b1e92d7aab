"""Booking a seat, cancelling it, and promoting the waitlist (spec B 2.4, 3, 4.3).

Every seat decision of a session happens under that session's row lock, taken before the
booking's: the count of confirmed seats cannot change between reading it and writing the
booking, so a full session never confirms one more. A booking is made under its membership's
row lock too (shared), taken first as billing orders its locks (organization, membership,
subscription, then session): a member removed meanwhile (access.leaving) either gives up the
seat or is refused it, never keeps it. The plan that pays the seat (a pack's session, see
bookings.quota) is locked between the two, by book() and by a cancel alike. A booking is
unique on (session, membership) across every status: booking again revives the cancelled or
soft-deleted row under the same id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.billing.accounts import billing_settings
from gymctl.bookings import codes, quota
from gymctl.bookings.eligibility import check_may_book
from gymctl.bookings.schedule import class_session_of
from gymctl.bridge import mirror
from gymctl.db import is_postgres, organization_row
from gymctl.errors import DomainError, conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import (
    Booking,
    BookingStatus,
    ClassSession,
    Membership,
    MembershipStatus,
    Organization,
    Subscription,
)

ACTIVE = (BookingStatus.confirmed, BookingStatus.waitlisted)


def booking_event(
    session: Session, name: str, booking: Booking, *, now: datetime, actor=None, **extra
):
    emit(
        session,
        EventKind.domain,
        name,
        at=now,
        aggregate_type="booking",
        aggregate_id=booking.id,
        organization_id=booking.organization_id,
        actor_user_id=actor,
        payload={
            "classSessionId": str(booking.class_session_id),
            "userId": str(booking.user_id),
            "status": booking.status.value,
            **extra,
        },
    )


def is_active(booking: Booking) -> bool:
    return booking.deleted_at is None and booking.status in ACTIVE


def confirmed_count(session: Session, class_session_id: uuid.UUID) -> int:
    return session.scalar(
        select(func.count())
        .select_from(Booking)
        .where(
            Booking.class_session_id == class_session_id,
            Booking.status == BookingStatus.confirmed,
            Booking.deleted_at.is_(None),
        )
    )


def _open_for_booking(row: ClassSession, now: datetime) -> None:
    if row.cancelled_at is not None:
        raise conflict(codes.SESSION_CANCELLED, "this session was cancelled")
    if row.starts_at <= now:
        raise conflict(codes.SESSION_STARTED, "this session has already started")


def _lock_active_member(session: Session, organization_id: uuid.UUID, member: Membership) -> None:
    """The membership's row lock (shared: one member's bookings do not wait on each other) and
    its status and its gym's deletion read under it, so a removal or a gym's deletion that
    committed first refuses the booking, and one that comes later waits for it
    (leaving.end_holdings then gives its seat up)."""
    status = session.scalar(
        select(Membership.status)
        .where(Membership.id == member.id, Membership.organization_id == organization_id)
        .with_for_update(read=True)
    )
    # A statement of its own, after the lock: PostgreSQL re-reads only the locked row of a
    # statement that waited, so a join would still see the gym as it was before the wait.
    if session.scalar(select(Organization.deleted_at).where(Organization.id == organization_id)):
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "the gym is deleted")
    if status is not MembershipStatus.active:
        # Staff book by user id: a suspended, cancelled or invited membership books nothing.
        raise conflict(codes.MEMBERSHIP_NOT_ACTIVE, "only an active member books a class")


def _already_booked(existing: Booking):
    raise conflict(
        codes.ALREADY_BOOKED,
        "you are already booked into this session",
        bookingId=str(existing.id),
        bookingStatus=existing.status.value,
    )


def _refuse_if_booked(session: Session, class_session_id, membership_id) -> Booking | None:
    """Unlocked: asked again under the session's lock. The row a booking would revive."""
    existing = session.scalar(
        select(Booking).where(
            Booking.class_session_id == class_session_id, Booking.membership_id == membership_id
        )
    )
    if existing is not None and is_active(existing):
        _already_booked(existing)
    return existing


def book(
    session: Session,
    organization_id: uuid.UUID,
    class_session_id: uuid.UUID,
    member: Membership,
    *,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> Booking:
    """Book `member` into the session: confirmed while seats remain, else waitlisted. A seat
    left free beside a waitlist (its first members could not book when it freed: a debt past
    its grace, say) goes to those waiting who may book now, before the newcomer."""
    _lock_active_member(session, organization_id, member)
    row = class_session_of(session, organization_id, class_session_id)
    _open_for_booking(row, now)  # refused early, without waiting on the session's lock
    check_may_book(session, organization_id, member.user_id, now=now)
    # Before a plan's refusal: the truer answer.
    revives = _refuse_if_booked(session, row.id, member.id)
    # A revived row may still hold a session (staff cancelled it after its check-in): given
    # back below before this one is spent, it counts as one left of its plan.
    held = revives.subscription_id if revives is not None else None
    plan = quota.plan_for_seat(session, organization_id, member.user_id, row, held=held)
    if revives is not None and revives.subscription_id is not None:
        quota.lock_plan(session, revives.subscription_id)  # given back below: before the session
    lock_waiting_members(session, row.id)  # the waiting are served first: see promote_waitlist
    row = class_session_of(session, organization_id, class_session_id, lock=True)
    _open_for_booking(row, now)  # again under the lock: the class may have been cancelled
    existing = session.scalar(
        select(Booking)
        .where(Booking.class_session_id == row.id, Booking.membership_id == member.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if existing is not None and is_active(existing):
        _already_booked(existing)
    still_held = existing.subscription_id if existing is not None else None
    if plan is not None and held is not None and still_held != held:
        quota.refuse_if_used_up(plan)  # the session `held` counted on was given back meanwhile
    promote_waitlist(session, row, now=now)  # the waiting first, under the session's lock
    full = confirmed_count(session, row.id) >= row.capacity
    status = BookingStatus.waitlisted if full else BookingStatus.confirmed
    revived = existing is not None
    if existing is None:
        booking = Booking(
            id=ids.new_id(),
            organization_id=organization_id,
            class_session_id=row.id,
            membership_id=member.id,
            user_id=member.user_id,
            created_at=now,
        )
        session.add(booking)
    else:
        booking = existing
        # A row ended after its check-in kept its session spent; revived, its check-in is
        # cleared and it spends anew: the session it recorded comes back first (once).
        quota.give_back(session, booking, row, now=now)
        booking.cancelled_at = None
        booking.checked_in_at = None
        booking.checkin_method = None
        booking.no_show_at = None
        booking.deleted_at = None
    booking.status = status
    booking.waitlisted_at = now if full else None
    booking.updated_at = now
    quota.spend(booking, plan, now=now)  # a waitlisted seat too: it is held for them
    session.flush()
    spent = {"subscriptionId": str(booking.subscription_id)} if booking.subscription_id else {}
    booking_event(
        session,
        "booking.created",
        booking,
        now=now,
        actor=actor_user_id,
        revived=revived,
        **spent,
    )
    mirror.booking_changed(session, booking, now=now)
    return booking


def booking_of(session: Session, organization_id: uuid.UUID, booking_id, *, lock=False) -> Booking:
    booking = organization_row(session, Booking, organization_id, booking_id, lock=lock)
    if booking is None:
        raise not_found(codes.BOOKING_NOT_FOUND, "no such booking")
    return booking


def _lock_pair(
    session: Session, organization_id: uuid.UUID, booking_id
) -> tuple[Booking, ClassSession]:
    """Billing's order: the booking's member and those waiting in its class (shared, in one
    id order), the plan the booking spent (bookings.quota), the session's lock, then the
    booking's. Ending the seat takes its member's sync-op lock (mirror), which a member being
    removed holds from their first seat given up while they wait for this class: holding the
    membership first, the cancel waits for the removal instead (and finds the seat given up)."""
    booking = booking_of(session, organization_id, booking_id)
    lock_waiting_members(session, booking.class_session_id, also=(booking.membership_id,))
    if booking.subscription_id is not None:
        quota.lock_plan(session, booking.subscription_id)
    row = class_session_of(session, organization_id, booking.class_session_id, lock=True)
    return booking_of(session, organization_id, booking_id, lock=True), row


def lock_waiting_members(
    session: Session,
    *class_session_ids: uuid.UUID,
    seated: bool = False,
    also: Iterable[uuid.UUID] = (),
) -> None:
    """The memberships waiting in the session, shared and in id order, before the session's
    lock (billing's order, membership before session): a seat freed there promotes one of
    them, and in a gym connected to the external system the promotion takes that member's
    sync-op lock (mirror), which a member leaving at that moment holds while waiting for this
    session. Held first, the leaving member's removal is waited for, not deadlocked with.
    Several sessions at once: their members in one id order, before any of their locks.
    `seated`: the members holding a seat there too (a class cancelled ends every seat, each
    under its member's sync-op lock); `also`: the members of other seats the caller ends (a
    cancel's own booking), in the same id order. PostgreSQL's: the embedded default holds its
    one write lock already."""
    if not is_postgres(session):
        return
    members = session.scalars(
        select(Booking.membership_id)
        .where(
            Booking.class_session_id.in_(class_session_ids),
            Booking.status.in_(ACTIVE if seated else (BookingStatus.waitlisted,)),
            Booking.deleted_at.is_(None),
        )
        .distinct()
    ).all()
    for membership_id in sorted({*members, *also}):
        session.scalar(
            select(Membership.id).where(Membership.id == membership_id).with_for_update(read=True)
        )


def _give_back(session: Session, booking: Booking, row: ClassSession, *, now: datetime) -> dict:
    """The plan's session back when the booking ends unused (bookings.quota.gives_back): the
    event's extra field naming the plan, or none."""
    if not quota.gives_back(booking, row, now=now):
        return {}
    returned = quota.give_back(session, booking, row, now=now)
    return {"sessionReturnedTo": str(returned)} if returned else {}


def cancel(
    session: Session,
    organization_id: uuid.UUID,
    booking_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    by_staff: bool,
    now: datetime,
    **extra,
) -> Booking:
    """Cancel a confirmed or waitlisted booking (the row is kept); a freed seat goes to the
    first waitlisted. Members cancel until the session starts and before they check in;
    staff at any time. `extra` goes into booking.cancelled (why, when the system cancels)."""
    booking, row = _lock_pair(session, organization_id, booking_id)
    if not is_active(booking):
        raise conflict(codes.BOOKING_NOT_ACTIVE, "this booking is not active")
    if not by_staff and row.starts_at <= now:
        raise conflict(codes.SESSION_STARTED, "this session has already started")
    if not by_staff and booking.checked_in_at is not None:
        # The seat was used: cancelled, it would pass to the waitlist (more people than seats).
        raise conflict(codes.BOOKING_CHECKED_IN, "you checked in: only staff cancel this booking")
    was_confirmed = booking.status == BookingStatus.confirmed
    given_back = _give_back(session, booking, row, now=now)
    booking.status = BookingStatus.cancelled
    booking.cancelled_at = now
    booking.waitlisted_at = None
    booking.updated_at = now
    session.flush()
    booking_event(
        session,
        "booking.cancelled",
        booking,
        now=now,
        actor=actor_user_id,
        **given_back,
        **extra,
    )
    mirror.booking_changed(session, booking, now=now)
    if was_confirmed:
        promote_waitlist(session, row, now=now)
    return booking


def give_up_uncovered(session: Session, *subscriptions: Subscription, now: datetime) -> int:
    """The plans just ended: in a gym that requires a plan to book, each member's confirmed or
    waitlisted seats in classes to come that no live plan of theirs pays now are given up as
    staff give one up (cancel: the waitlist moves up, an unused session comes back), in the
    ending's transaction. A monthly plan booked past its period end (it renews), so ending
    otherwise left those seats held. A seat a covering pack with a session left can pay is
    kept on it instead: it spends that session, as booking it there would have
    (`_pay_with_pack`), earlier classes first; one paid already (an unlimited plan, or the
    pack it spent) stays as it is. A class started, or a seat checked in to, is left as it
    is; a membership that ended gives up all its seats itself (access.leaving.end_holdings).
    The caller holds each membership (lock_subscription, or the lifecycle's first step) and
    plan; the rest follow in billing's order, every lock of every plan's seats before the
    first class's: the memberships (shared), the plans the seats spent and the packs that may
    pay them, the waiting members, then each session and its booking. The seats given up."""
    unpaid: list[tuple[Any, Subscription, list[Subscription]]] = []
    for subscription in subscriptions:
        seats = _unpaid(session, subscription, now)
        unpaid += [(seat, subscription, packs) for seat, packs in seats]
    plan_ids = {seat.subscription_id for seat, _, _ in unpaid if seat.subscription_id}
    plan_ids.update(pack.id for _, _, packs in unpaid for pack in packs)
    for plan_id in sorted(plan_ids):
        quota.lock_plan(session, plan_id)  # read fresh: the packs' sessions left as they stand
    lock_waiting_members(session, *{seat.class_session_id for seat, _, _ in unpaid})
    given_up = 0
    for seat, subscription, packs in unpaid:
        organization_id = subscription.organization_id
        # Those waiting now (one may have joined since the locks above) before the class, as
        # cancel takes them (_lock_pair): a waiter's removal holds its membership, then waits
        # for this class.
        lock_waiting_members(session, seat.class_session_id)
        row = class_session_of(session, organization_id, seat.class_session_id, lock=True)
        booking = booking_of(session, organization_id, seat.id, lock=True)
        if not is_active(booking) or booking.subscription_id != seat.subscription_id:
            continue  # its member's cancel committed first, or this call paid it already
        if _pay_with_pack(session, booking, row, packs, ended=subscription, now=now):
            continue
        cancel(
            session,
            organization_id,
            seat.id,
            actor_user_id=None,
            by_staff=True,
            now=now,
            planEnded=str(subscription.id),
        )
        given_up += 1
    return given_up


def _pay_with_pack(
    session: Session,
    booking: Booking,
    row: ClassSession,
    packs: list[Subscription],
    *,
    ended: Subscription,
    now: datetime,
) -> bool:
    """A seat no plan pays any more kept on a covering pack with a session left (quota.
    paying_pack, its row locked): the booking spends that session and records the pack, so a
    cancel before the class gives it back; a session it spent on a plan that ended is given
    back first. Kept for free, the member had the class on a session the pack still counted,
    and booked another with it. `booking.plan_changed` says which plan pays it now (the pack's
    count moved without the member's asking), as booking.created names the plan spent. False
    when no pack pays it (it is given up)."""
    pack = quota.paying_pack(packs, row.starts_at)
    if pack is None:
        return False
    given_back = _give_back(session, booking, row, now=now)  # a class to come: it returns
    quota.spend(booking, pack, now=now)
    booking.updated_at = now
    booking_event(
        session,
        "booking.plan_changed",
        booking,
        now=now,
        subscriptionId=str(pack.id),
        planEnded=str(ended.id),
        **given_back,
    )
    return True


def _unpaid(
    session: Session, subscription: Subscription, now: datetime
) -> list[tuple[Any, list[Subscription]]]:
    """The seats to come of the plan's membership that no live plan of it pays without a
    session more, each with the packs (quota plans) of the membership that cover its class,
    read under the membership's lock (shared); none where the gym books without plans."""
    if not billing_settings(session, subscription.organization_id).plan_required_to_book:
        return []
    status = session.scalar(
        select(Membership.status)
        .where(Membership.id == subscription.membership_id)
        .with_for_update(read=True)
    )
    if status not in (MembershipStatus.active, MembershipStatus.suspended):
        return []
    seats = session.execute(
        select(
            Booking.id, Booking.subscription_id, Booking.class_session_id, ClassSession.starts_at
        )
        .join(ClassSession, ClassSession.id == Booking.class_session_id)
        .where(
            Booking.membership_id == subscription.membership_id,
            Booking.status.in_(ACTIVE),
            Booking.deleted_at.is_(None),
            Booking.checked_in_at.is_(None),
            ClassSession.cancelled_at.is_(None),
            ClassSession.starts_at > now,
        )
        .order_by(ClassSession.starts_at, Booking.id)
    ).all()
    # The membership's plans, not the plan's user's: a link of one person's two rows leaves a
    # plan they held on both on the retired row (access.folding), under the kept membership.
    plans = session.scalars(
        select(Subscription).where(
            Subscription.membership_id == subscription.membership_id,
            Subscription.deleted_at.is_(None),
        )
    ).all()
    return [
        (
            seat,
            [
                plan
                for plan in plans
                if plan.sessions_remaining is not None and quota.covers(plan, seat.starts_at)
            ],
        )
        for seat in seats
        if not quota.paid_without_spending(plans, seat.starts_at, seat.subscription_id)
    ]


def remove(
    session: Session,
    organization_id: uuid.UUID,
    booking_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> Booking:
    """Staff soft-delete a booking (deleted_at); a booking again revives the row."""
    booking, row = _lock_pair(session, organization_id, booking_id)
    if booking.deleted_at is not None:
        raise conflict(codes.BOOKING_NOT_ACTIVE, "this booking was already removed")
    frees_seat = booking.status == BookingStatus.confirmed
    given_back = _give_back(session, booking, row, now=now) if is_active(booking) else {}
    booking.deleted_at = now
    booking.updated_at = now
    session.flush()
    booking_event(session, "booking.removed", booking, now=now, actor=actor_user_id, **given_back)
    mirror.booking_changed(session, booking, now=now)
    if frees_seat:
        promote_waitlist(session, row, now=now)
    return booking


def promote_waitlist(session: Session, row: ClassSession, *, now: datetime) -> list[Booking]:
    """Confirm the first waitlisted bookings while seats are free (caller holds the session
    lock); each promotion writes booking.promoted. None after the session started. A turn
    comes to one who may book now, as `book` would have it: an active member the booking
    rules do not refuse (a membership that ended, a debt past its grace, a plan that no longer
    covers the class). One who may not keeps their place in the line and is passed over,
    rather than given the seat."""
    if row.cancelled_at is not None or row.starts_at <= now:
        return []
    if session.get(Organization, row.organization_id).deleted_at is not None:
        return []  # its members' seats are given up one by one: none passes to another
    free = row.capacity - confirmed_count(session, row.id)
    if free <= 0:
        return []
    waiting = session.scalars(
        select(Booking)
        .join(Membership, Membership.id == Booking.membership_id)
        .where(
            Booking.class_session_id == row.id,
            Booking.status == BookingStatus.waitlisted,
            Booking.deleted_at.is_(None),
            Membership.status == MembershipStatus.active,
        )
        .order_by(Booking.waitlisted_at, Booking.created_at, Booking.id)
        .with_for_update(of=Booking)  # the bookings only: memberships are locked first or not
    ).all()
    promoted: list[Booking] = []
    for booking in waiting:
        if len(promoted) == free:
            break
        try:
            check_may_book(session, row.organization_id, booking.user_id, now=now)
        except DomainError:
            continue
        if not quota.still_covered(session, booking, row):
            continue
        promoted.append(booking)
        promote(session, booking, now=now)
    session.flush()
    return promoted


def promote_where_waiting(
    session: Session, organization_id: uuid.UUID, membership_id: uuid.UUID, *, now: datetime
) -> int:
    """A refusal of the member lifted (a debt paid): the lines they wait in for classes to
    come run again. promote_waitlist passed them over while the refusal stood, and a seat it
    left free then stayed free, nothing else running the line until the class started and
    the closing pass cancelled them beside it. The caller holds the membership (and, on
    PostgreSQL, the waiting members before it: lock_subscription's may_end_at); the waiting
    members, shared and in id order, then each session, as a cancel takes them. How many were
    promoted (the member, or others first in line who may book now too)."""
    waiting_in = session.scalars(
        select(Booking.class_session_id)
        .join(ClassSession, ClassSession.id == Booking.class_session_id)
        .where(
            Booking.membership_id == membership_id,
            Booking.status == BookingStatus.waitlisted,
            Booking.deleted_at.is_(None),
            ClassSession.cancelled_at.is_(None),
            ClassSession.starts_at > now,
        )
        .order_by(ClassSession.starts_at, ClassSession.id)
    ).all()
    if not waiting_in:
        return 0
    lock_waiting_members(session, *waiting_in)
    promoted = 0
    for class_session_id in waiting_in:
        row = class_session_of(session, organization_id, class_session_id, lock=True)
        promoted += len(promote_waitlist(session, row, now=now))
    return promoted


def promote(session: Session, booking: Booking, *, now: datetime) -> None:
    """A waitlisted booking takes a seat: booking.promoted (spec B 3), mirrored as a booking."""
    booking.status = BookingStatus.confirmed
    booking.waitlisted_at = None
    booking.updated_at = now
    booking_event(session, "booking.promoted", booking, now=now)
    mirror.booking_changed(session, booking, now=now)


def seat_counts(session: Session, class_session_ids: list[uuid.UUID]) -> dict[uuid.UUID, dict]:
    """{session id: {confirmed, waitlisted}} in one query (soft-deleted rows left out)."""
    counts: dict[uuid.UUID, dict] = {}
    if not class_session_ids:
        return counts
    rows = session.execute(
        select(Booking.class_session_id, Booking.status, func.count())
        .where(
            Booking.class_session_id.in_(class_session_ids),
            Booking.status.in_(ACTIVE),
            Booking.deleted_at.is_(None),
        )
        .group_by(Booking.class_session_id, Booking.status)
    )
    for class_session_id, status, count in rows:
        entry = counts.setdefault(class_session_id, {"confirmed": 0, "waitlisted": 0})
        entry[status.value] = count
    return counts


def roster(session: Session, class_session_id: uuid.UUID) -> list[Booking]:
    """The session's bookings that are not soft-deleted: confirmed first, then the waitlist."""
    rows = session.scalars(
        select(Booking)
        .where(Booking.class_session_id == class_session_id, Booking.deleted_at.is_(None))
        .order_by(Booking.waitlisted_at.nulls_first(), Booking.created_at, Booking.id)
    ).all()
    return list(rows)
