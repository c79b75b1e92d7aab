"""External to platform: what the schedule poll and the booking reconcile notice is applied
(docs/decisions.md, issue 18). During the migration members and the gym's desk still act on
the external system, so an act there that the platform can take as it is, is taken, with an
event and an audit row; one it cannot take safely becomes an issue in the owner's inbox.
Nothing noticed is dropped: each case ends in one of the two, in the poll's transaction.

- A mirrored booking gone there (cancelled, or moved: gone here, new there): the platform
  booking is cancelled as staff would (the freed seat goes to the waitlist).
- A booking made there by a linked member in a linked class: booked on the platform as the
  member would be; refused, waitlisted (the platform has no seat) or in an unlinked class: an
  issue (booking_not_placed).
- A linked class removed there: before its series' cutover (see cutover) the platform session
  is cancelled with its bookings; from it on, an issue (class_removed).
- The coach changed there: before the cutover the platform session takes the coach when the
  entity map links that staff member, else an issue (coach_unmapped); one who is no longer
  active staff here leaves the session without a coach, and an issue (coach_ineligible);
  from it on, the platform's coach is sent back there (schedule.coach).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gymctl.billing.accounts import billing_settings
from gymctl.bookings import book as bookings
from gymctl.bookings import quota, schedule
from gymctl.bookings.cancel_class import SESSION_CANCELLED
from gymctl.bookings.codes import COACH_INELIGIBLE
from gymctl.bookings.eligibility import BOOKABLE
from gymctl.bridge import codes, cutover, entity_map, queue
from gymctl.bridge.polling import Noticed
from gymctl.db import is_postgres
from gymctl.errors import DomainError, conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import Booking, BookingStatus, ClassSession, Membership, Subscription
from gymctl.models.bridge import BridgeIssue, EntityLink, EntityType, IntegrationConnection


def raise_issue(
    session: Session,
    organization_id: uuid.UUID,
    kind: str,
    subject: str,
    details: dict[str, Any],
    *,
    now: datetime,
) -> BridgeIssue:
    """Open (or refresh) the owner's inbox entry for `subject`; ids only, no personal data."""
    issue = session.scalar(
        select(BridgeIssue).where(
            BridgeIssue.organization_id == organization_id,
            BridgeIssue.kind == kind,
            BridgeIssue.subject == subject,
        )
    )
    if issue is None:
        issue = BridgeIssue(organization_id=organization_id, kind=kind, subject=subject,
                            created_at=now)  # fmt: skip
        session.add(issue)
    issue.details = details
    issue.status = "open"
    issue.resolved_at = None
    issue.updated_at = now
    session.flush()
    return issue


def _audit(session, name, organization_id, aggregate_type, aggregate_id, payload, now) -> None:
    emit(session, EventKind.audit, name, at=now, aggregate_type=aggregate_type,
         aggregate_id=str(aggregate_id), organization_id=organization_id,
         payload={"source": "external_system", **payload})  # fmt: skip


def audit(
    session: Session,
    organization_id: uuid.UUID,
    name: str,
    payload: dict[str, Any],
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None,
) -> None:
    """An operator's or owner's act on the bridge, under their user (ids only)."""
    emit(session, EventKind.audit, name, at=now, aggregate_type="organization",
         aggregate_id=str(organization_id), organization_id=organization_id,
         actor_user_id=actor_user_id, payload=payload)  # fmt: skip


def _session_of(session: Session, organization_id, external_class: str) -> ClassSession | None:
    link = entity_map.find_external(session, organization_id, EntityType.schedule, external_class)
    if link is None or link.platform_id is None:
        return None
    return session.get(ClassSession, uuid.UUID(link.platform_id))


def booking_cancelled(session: Session, organization_id, row: EntityLink, now: datetime) -> str:
    if row.platform_id is None:
        return "unplaced"
    booking = session.get(Booking, uuid.UUID(row.platform_id))
    if booking is None or not bookings.is_active(booking):
        return "already_inactive"
    bookings.cancel(session, organization_id, booking.id, actor_user_id=None, by_staff=True,
                    now=now)  # fmt: skip
    _audit(session, "bridge.booking_cancelled_externally", organization_id, "booking",
           booking.id, {"externalBookingId": row.external_id}, now)  # fmt: skip
    return "cancelled"


def booking_seen(session: Session, organization_id, row: EntityLink, now: datetime) -> str:
    details = {"externalBookingId": row.external_id, "externalClassId": row.data["scheduleId"],
               "memberId": row.data["memberId"]}  # fmt: skip
    target = _session_of(session, organization_id, row.data["scheduleId"])
    member = session.get(Membership, uuid.UUID(row.data["memberId"]))
    if target is None or member is None:
        raise_issue(session, organization_id, "booking_not_placed", row.external_id,
                    {**details, "reason": "class_unlinked"}, now=now)  # fmt: skip
        return "issue"
    existing = session.scalar(
        select(Booking).where(
            Booking.class_session_id == target.id, Booking.membership_id == member.id
        )
    )
    if (
        existing is not None
        and bookings.is_active(existing)
        and existing.status is BookingStatus.waitlisted
    ):
        # Waiting here is no seat: linked as one, the registration there was left booked for
        # ever once the member cancelled here (a waitlisted booking is never mirrored).
        raise_issue(session, organization_id, "booking_not_placed", row.external_id,
                    {**details, "reason": codes.SESSION_FULL}, now=now)  # fmt: skip
        return "issue"
    if existing is not None and bookings.is_active(existing):
        placed, outcome = existing, "already_booked"
    else:
        nested = session.begin_nested()
        try:
            placed = bookings.book(session, organization_id, target.id, member,
                                   actor_user_id=member.user_id, now=now)  # fmt: skip
            if placed.status is not BookingStatus.confirmed:
                raise conflict(codes.SESSION_FULL, "the platform has no seat for it")
        except DomainError as refused:
            nested.rollback()
            raise_issue(session, organization_id, "booking_not_placed", row.external_id,
                        {**details, "reason": refused.code}, now=now)  # fmt: skip
            return "issue"
        nested.commit()
        outcome = "booked"
        _audit(session, "bridge.booking_made_externally", organization_id, "booking",
               placed.id, {"externalBookingId": row.external_id}, now)  # fmt: skip
    held = entity_map.find(session, organization_id, EntityType.booking, placed.id)
    if held is not None and held is not row:
        held.platform_id = None  # an older external booking of this seat gives way
        session.flush()
    row.platform_id = str(placed.id)
    row.updated_at = now
    session.flush()
    return outcome


def class_removed(session: Session, organization_id, row: EntityLink, now: datetime) -> str:
    # Under the session's row lock, as every seat decision of it: the roster read below is
    # the one cancelled, and a booking waiting on the lock then finds the class cancelled.
    # The plans its bookings spent are locked before it (billing's order, as book() takes
    # them): each cancel below gives a session back (bookings.quota).
    quota.lock_plans_of_session(session, uuid.UUID(row.platform_id))
    target = session.scalar(
        select(ClassSession)
        .where(ClassSession.id == uuid.UUID(row.platform_id))
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if target is None or target.cancelled_at is not None:
        return "already_cancelled"
    active = [b for b in bookings.roster(session, target.id) if bookings.is_active(b)]
    started = target.starts_at <= now
    if started or cutover.platform_owns(session, target):
        # A class that has started is not cancelled (cancel_class: its attendance is the
        # record then), whoever removed it: the owner hears of it, nothing else changes.
        raise_issue(session, organization_id, "class_removed", row.external_id,
                    {"externalClassId": row.external_id, "sessionId": str(target.id),
                     "activeBookings": len(active), "started": started}, now=now)  # fmt: skip
        return "issue"
    # Before its series' cutover the external system's timetable stands: the class is off.
    target.cancelled_at = now  # first: a cancel below promotes no one into a cancelled class
    for booking in active:  # the gym called it off, as staff do here: its members are pushed
        bookings.cancel(session, organization_id, booking.id, actor_user_id=None,
                        by_staff=True, now=now, reason=SESSION_CANCELLED)  # fmt: skip
    quota.give_back_kept(session, target, now=now)
    _audit(session, "bridge.class_cancelled_externally", organization_id, "class_session",
           target.id, {"externalClassId": row.external_id, "cancelledBookings": len(active)},
           now)  # fmt: skip
    return "cancelled"


def coach_changed(session: Session, organization_id, row: EntityLink, now: datetime) -> str:
    target = session.get(ClassSession, uuid.UUID(row.platform_id))
    coach = row.data.get("coachId")
    staff = (
        entity_map.find_external(session, organization_id, EntityType.staff, coach)
        if coach
        else None
    )
    membership = session.get(Membership, uuid.UUID(staff.platform_id)) if staff else None
    if target is None:
        return "no_session"
    if cutover.platform_owns(session, target):
        return _coach_back(session, organization_id, row, target, now)
    if membership is None:
        raise_issue(session, organization_id, "coach_unmapped", row.external_id,
                    {"externalClassId": row.external_id, "sessionId": str(target.id),
                     "externalCoachId": coach}, now=now)  # fmt: skip
        return "issue"
    # A linked coach who is no longer active staff here (left, or made a member) coaches
    # nothing (schedule.may_coach): the class keeps no coach, not them nor the one replaced
    # there, and the owner hears of it.
    eligible = schedule.may_coach(session, organization_id, membership.user_id)
    coach_user_id = membership.user_id if eligible else None
    if target.coach_user_id != coach_user_id:
        target.coach_user_id = coach_user_id
        _audit(session, "bridge.coach_changed_externally", organization_id, "class_session",
               target.id, {"externalCoachId": coach, "coachEligible": eligible}, now)  # fmt: skip
    if not eligible:
        raise_issue(session, organization_id, COACH_INELIGIBLE, row.external_id,
                    {"externalClassId": row.external_id, "sessionId": str(target.id),
                     "externalCoachId": coach, "memberId": str(membership.id)},
                    now=now)  # fmt: skip
        return "issue"
    return "applied"


def _coach_back(session: Session, organization_id, row: EntityLink, target, now) -> str:
    """From the series' cutover the platform's coach stands: it is sent there again."""
    coach = session.scalar(
        select(Membership).where(
            Membership.organization_id == organization_id,
            Membership.user_id == target.coach_user_id,
        )
    ) if target.coach_user_id else None  # fmt: skip
    if coach is None:
        raise_issue(session, organization_id, "coach_unmapped", row.external_id,
                    {"externalClassId": row.external_id, "sessionId": str(target.id),
                     "externalCoachId": row.data.get("coachId")}, now=now)  # fmt: skip
        return "issue"
    ours = entity_map.find(session, organization_id, EntityType.staff, coach.id)
    if ours is not None and ours.external_id == row.data.get("coachId"):
        return "agrees"  # our own change coming back
    queue.enqueue(session, organization_id=organization_id, op_type="schedule.coach",
                  payload={"sessionId": str(target.id), "coachId": str(coach.id)},
                  now=now)  # fmt: skip
    return "reverted"


HANDLERS = {
    "booking_cancelled": booking_cancelled,
    "booking_seen": booking_seen,
    "class_removed": class_removed,
    "coach_changed": coach_changed,
}


def lock_first(session: Session, organization_id: uuid.UUID, noticed: Noticed) -> None:
    """The memberships, then the plans, that applying `noticed` will lock, locked before any
    class session's (billing's order: organization, membership, subscription, then the
    session). The changes are applied one after another in the poll's one transaction and
    each takes a class session's lock: a member booked after that took the membership's lock
    while holding a session's, the reverse order, and a member leaving meanwhile (the
    membership's lock, then each seat's session) ended one side in a deadlock. So did a seat
    of a leaving member cancelled or promoted here: the mirror's lock of the member's ops
    (mirror._last_op), which the leaving member's first cancelled seat already held.

    Locked: each member booked, each member whose seat is cancelled, each member waiting in a
    class where a seat is freed or taken (a promotion), shared as book() takes a membership;
    each plan a seat spends or gets back, as bookings.quota locks it. On the embedded default
    the transaction already holds the database's one write lock: nothing to order."""
    if not is_postgres(session):
        return
    booked: set[uuid.UUID] = set()  # members book() locks, with a plan of theirs
    ending: set[uuid.UUID] = set()  # bookings cancelled: their plan gets its session back
    removed: set[uuid.UUID] = set()  # classes cancelled with every active booking
    seats: set[uuid.UUID] = set()  # classes whose waitlist a freed or taken seat promotes
    for kind, row in noticed:
        if kind == "booking_seen":
            booked.add(uuid.UUID(row.data["memberId"]))
            target = _session_of(session, organization_id, row.data["scheduleId"])
            if target is not None:
                seats.add(target.id)
        elif kind == "booking_cancelled" and row.platform_id is not None:
            ending.add(uuid.UUID(row.platform_id))
        elif kind == "class_removed" and row.platform_id is not None:
            removed.add(uuid.UUID(row.platform_id))
    if ending:
        seats |= set(
            session.scalars(select(Booking.class_session_id).where(Booking.id.in_(ending)))
        )
    members, plans = set(booked), set()
    if ending or removed or seats:
        rows = session.execute(  # columns: the handlers read the rows fresh, under the locks
            select(
                Booking.id,
                Booking.class_session_id,
                Booking.membership_id,
                Booking.subscription_id,
                Booking.status,
            ).where(
                or_(Booking.id.in_(ending), Booking.class_session_id.in_(removed | seats)),
                Booking.status.in_(bookings.ACTIVE),
                Booking.deleted_at.is_(None),
            )
        ).all()
        for booking_id, class_id, membership_id, plan, status in rows:
            ends = booking_id in ending or class_id in removed
            if ends or status is BookingStatus.waitlisted:
                members.add(membership_id)
            if ends and plan is not None:
                plans.add(plan)
    if booked and billing_settings(session, organization_id).plan_required_to_book:
        plans |= set(
            session.scalars(  # the plans bookings.quota.plan_for_seat may lock for a seat
                select(Subscription.id).where(
                    Subscription.membership_id.in_(booked),
                    Subscription.status.in_(BOOKABLE),
                    Subscription.ended_at.is_(None),
                    Subscription.deleted_at.is_(None),
                )
            )
        )
    if plans:
        members |= set(
            session.scalars(select(Subscription.membership_id).where(Subscription.id.in_(plans)))
        )
    for membership_id in sorted(members):
        session.scalar(
            select(Membership.id).where(Membership.id == membership_id).with_for_update(read=True)
        )
    for subscription_id in sorted(plans):
        session.scalar(
            select(Subscription.id).where(Subscription.id == subscription_id).with_for_update()
        )


def apply(session: Session, connection: IntegrationConnection, noticed: Noticed, now) -> dict:
    """Each noticed change, applied or raised; counts by kind and outcome. The locks they take
    are ordered first (lock_first)."""
    lock_first(session, connection.organization_id, noticed)
    counts: dict[str, int] = {}
    for kind, row in noticed:
        outcome = HANDLERS[kind](session, connection.organization_id, row, now)
        key = f"{kind}:{outcome}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def open_issues(session: Session, organization_id: uuid.UUID) -> list[BridgeIssue]:
    return list(
        session.scalars(
            select(BridgeIssue)
            .where(BridgeIssue.organization_id == organization_id, BridgeIssue.status == "open")
            .order_by(BridgeIssue.created_at, BridgeIssue.id)
        )
    )


def dismiss_issue(
    session: Session,
    organization_id: uuid.UUID,
    issue_id: uuid.UUID,
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    operator: str | None = None,
) -> BridgeIssue:
    """The owner has settled it (or chosen to leave it): it leaves the inbox, audited."""
    issue = session.get(BridgeIssue, issue_id, with_for_update=True)
    if issue is None or issue.organization_id != organization_id:
        raise not_found(codes.BRIDGE_ISSUE_NOT_FOUND, "no such issue")
    if issue.status != "open":
        raise conflict(codes.BRIDGE_ISSUE_NOT_OPEN, f"the issue is {issue.status}")
    issue.status = "dismissed"
    issue.resolved_at = issue.updated_at = now
    emit(session, EventKind.audit, "bridge.issue_dismissed", at=now, aggregate_type="bridge_issue",
         aggregate_id=str(issue.id), organization_id=organization_id, actor_user_id=actor_user_id,
         payload={"kind": issue.kind, **({"operator": operator} if operator else {})})  # fmt: skip
    return issue


def describe(issue: BridgeIssue) -> dict[str, Any]:
    return {"id": str(issue.id), "kind": issue.kind, "subject": issue.subject,
            "details": issue.details, "status": issue.status,
            "createdAt": issue.created_at.isoformat()}  # fmt: skip
