"""What a membership holds ends with it. A member removed by staff, erased, in a gym that was
deleted, or whose login the identity provider deleted is no longer anyone the gym serves: the
collector charged their plan on, and its settlement made the ended membership active again;
their seats stayed taken while the waitlist waited. Each of those flows calls `end_holdings` in
its own transaction.

- Live plans are cancelled (reason `membership_ended`): nothing renews or is charged again. What
  they owe stays owed, on the record (a debt is paid at the desk or refunded by the gym), and
  a renewal in flight that settles finds its renewal date gone: it is recorded for review
  (settlementReview), not granted; a debt retry in flight that settles paid the debt the plan
  kept: it is restored from debt and the plan stays ended (attempts._drift).
  Each plan is ended under its row lock, taken in billing's fixed order (organization,
  membership, subscription: attempts.lock_subscription) and read again under it: a charge being
  settled or a notice being settled at that moment commits first, and the plan is ended as it
  left it (a notice settled has already ended it), never from a copy read before.
- Seats in sessions to come are given up as staff would give them up: the waitlist moves up.
  Under the membership's row lock, which a booking holds shared: one in flight is given up
  too, never left behind.
- Classes to come that a leaving member of staff coaches are left without a coach, for staff
  to assign another (a coach is active staff: schedule.check_coach); those that started keep
  who coached them. Counted in the caller's record, not mirrored (the bridge's schedule.coach
  names a coach; there is none to name).
Each plan and seat is mirrored to the bridge and written as the event it always writes; last, the
member's external user is deactivated there (bridge.mirror.member_retired).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing.attempts import end_plan, lock_subscription, waiting_in_classes_of
from gymctl.billing.plans import lock_plans
from gymctl.bookings import book, schedule
from gymctl.bookings.eligibility import LIVE
from gymctl.bridge import mirror
from gymctl.db import is_postgres
from gymctl.models import Booking, ClassSession, Membership, Subscription
from gymctl.models.billing import SubscriptionStatus

MEMBERSHIP_ENDED = "membership_ended"


def lock_leaving(session: Session, membership: Membership, *, now: datetime) -> None:
    """The memberships a leaving member's seats touch, in one id order, before anything else:
    their own (exclusively) and the members waiting in the classes they hold seats in
    (shared, as bookings.book.lock_waiting_members takes them before a class's lock). Their
    own first and the others' later, two members each waiting in a class where the other
    holds a seat each held their own and waited for the other's: PostgreSQL ended one (503).
    Call it before the membership row is written. PostgreSQL's: the embedded default holds
    its one write lock already."""
    if not is_postgres(session):
        return
    waiting = session.scalars(waiting_in_classes_of(membership.id, now)).all()
    for membership_id in sorted({membership.id, *waiting}):
        session.scalar(
            select(Membership.id)
            .where(Membership.id == membership_id)
            .with_for_update(read=membership_id != membership.id)
        )


def end_holdings(
    session: Session, membership: Membership, *, actor_user_id: uuid.UUID | None, now: datetime
) -> dict[str, int]:
    """End the membership's live plans, give up its seats to come and, once no longer staff,
    the classes to come it coaches; the counts of each."""
    # The membership's row lock first (billing's order): a booking in flight holds it shared
    # (bookings.book), so it commits before the seats below are read, and its seat is in them.
    lock_leaving(session, membership, now=now)
    candidates = session.scalars(
        select(Subscription.id)
        .where(
            Subscription.membership_id == membership.id,
            Subscription.status.in_(LIVE),
            Subscription.deleted_at.is_(None),
        )
        .order_by(Subscription.id)
    ).all()
    # The member's subscriptions first (in id order, each read as its lock found it), then the
    # catalogue plans the unpaid ones give their places back to (attempts.end_plan), in id
    # order: a presale's switch takes its subscription, then those plans; taken one at a time
    # as each subscription ended, two removals could each hold a plan the other waited for.
    locked = [lock_subscription(session, subscription_id) for subscription_id in candidates]
    # Ended meanwhile (a notice settled): nothing left to end.
    live = [row for row in locked if row is not None and row.status in LIVE]
    lock_plans(session, (row.plan_id for row in live if row.status == SubscriptionStatus.scheduled))
    for subscription in live:
        end_plan(session, subscription, reason=MEMBERSHIP_ENDED, now=now)
    plans = len(live)
    seats = session.scalars(
        select(Booking.id)
        .join(ClassSession, ClassSession.id == Booking.class_session_id)
        .where(
            Booking.membership_id == membership.id,
            Booking.status.in_(book.ACTIVE),
            Booking.deleted_at.is_(None),
            ClassSession.cancelled_at.is_(None),
            ClassSession.starts_at > now,
        )
        .order_by(ClassSession.starts_at, Booking.id)
    ).all()
    for booking_id in seats:
        book.cancel(
            session,
            membership.organization_id,
            booking_id,
            actor_user_id=actor_user_id,
            by_staff=True,
            now=now,
        )
    uncoached = schedule.release_coach(
        session, membership.organization_id, membership.user_id, now=now
    )
    # Last, behind the plans and seats it gave up there: the member's external user names no
    # one the gym serves now (deactivated there; made active again if they come back).
    mirror.member_retired(session, membership, now=now)
    session.flush()
    return {"plansEnded": plans, "seatsGivenUp": len(seats), "sessionsUncoached": uncoached}
