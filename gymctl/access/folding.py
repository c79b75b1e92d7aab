"""Two rows of one person become one (spec A 5.3): a login linked to the profile a gym created
for its address, at sign-in once the address is proven or by the person's consent to a link
request. What the retired row holds follows the person: plans, payments, cards, bookings, tasks
and notices are re-pointed, never left on a retired row (the person's own routes read rows by
their id) and never deleted with a membership (plans and bookings cascade from one).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, aliased

from gymctl.access.leaving import end_holdings
from gymctl.access.memberships import end_sales_grant
from gymctl.billing.attempts import end_plan, lock_subscription
from gymctl.billing.plans import lock_plans
from gymctl.bridge import mirror
from gymctl.events import EventKind, emit
from gymctl.models import (
    Booking,
    Membership,
    MembershipStatus,
    MovementVideoReport,
    SalesGrant,
    Subscription,
    User,
)
from gymctl.models.base import Base
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.models.bridge import EntityLink, EntityType
from gymctl.retention.plan_change import charge_in_flight
from gymctl.tasks import file_task

# Rows naming a person that the column-by-column move leaves: one membership per gym and one
# report per video (folded below: _fold_reports), one consent per document (the kept row's
# stand), and the retired row's own provider sessions (the ownership trail of that login).
_NOT_MOVED = {"memberships", "legal_consents", "movement_video_reports", "user_sessions"}
# A membership that stands as it is whatever the other row holds: active, or suspended by the
# gym (a link never lifts a suspension, as a public link does not: decisions, join).
_STANDING = (MembershipStatus.active, MembershipStatus.suspended)
_NEVER_STARTED = (MembershipStatus.invited, MembershipStatus.pending_invitation)


def fold_person(session: Session, source: User, target: User, *, now: datetime) -> None:
    """Everything `source` holds becomes `target`'s; `source` is then empty but for what stays
    (the caller retires it). Where both are members of one gym, one membership goes on: the
    target's, unless only the source's is active and the target's is not suspended (a link
    demotes no active member, and lifts no suspension the gym decided). The other takes nothing
    with it, its plans and bookings moved first, and ends (cancelled), kept on the retired row
    with what the gym collected on it (its national id, its bridge links), as erasure keeps it;
    but the target's is deleted when it never started and holds nothing (decisions s41)."""
    ended, moved = [], []
    kept = {
        membership.organization_id: membership
        for membership in session.scalars(select(Membership).where(Membership.user_id == target.id))
    }
    for membership in session.scalars(select(Membership).where(Membership.user_id == source.id)):
        theirs = kept.get(membership.organization_id)
        if theirs is None:
            membership.user_id = target.id
        elif theirs.status not in _STANDING and membership.status is MembershipStatus.active:
            moved.append(_fold_membership(session, theirs, membership, now=now))
            if _never_started(session, theirs):
                session.delete(theirs)
                session.flush()
                membership.user_id = target.id
            else:
                _trade_places(session, membership, theirs, source, now=now)
                if theirs.status is not MembershipStatus.cancelled:
                    theirs.status = MembershipStatus.cancelled
                    ended.append(theirs)
                theirs.invitation_held = False
                theirs.updated_at = now
        else:
            moved.append(_fold_membership(session, membership, theirs, now=now))
            if membership.status is MembershipStatus.active:
                _keep_role(session, membership, theirs, now=now)
            membership.status = MembershipStatus.cancelled
            ended.append(membership)
        membership.updated_at = now
    session.flush()
    _move_plans(session, source, target, now=now)
    for column in _person_columns():
        session.execute(
            update(column.table).where(column == source.id).values({column.name: target.id})
        )
    _fold_reports(session, source, target)
    # The person goes on as the target: the source's own retired rows too (one step away).
    session.execute(
        update(User).where(User.folded_into_id == source.id).values(folded_into_id=target.id)
    )
    source.folded_into_id = target.id
    session.flush()
    for dropped, goes_on, plans, seats in moved:  # the bridge follows them to the kept member
        mirror.member_folded(session, dropped, goes_on, now=now)
        mirror.holdings_moved(session, goes_on.organization_id, dropped.id, plans, seats, now=now)
    for membership in ended:  # a seat the kept one holds too: given up, the waitlist moves up
        end_holdings(session, membership, actor_user_id=None, now=now)
        # A grant the kept one did not take (it holds its own) ends with the membership, as it
        # does at any end: left live, it would outlast the role it was granted for.
        end_sales_grant(session, membership, actor_user_id=None, now=now)
    for dropped, *_ in moved:  # last: after every seat given up there, end_holdings' too
        mirror.member_retired(session, dropped, now=now)


def _fold_reports(session: Session, source: User, target: User) -> None:
    """The retired row's video reports become the person's: one per person and video, so one
    the target holds for the same video stands and the retired row's goes. Left on the retired
    row they still counted, and the person reporting again counted twice toward a demotion."""
    held = aliased(MovementVideoReport)
    on_target = (
        select(held.id)
        .where(
            held.user_id == target.id,
            held.movement_id == MovementVideoReport.movement_id,
            held.video_url == MovementVideoReport.video_url,
        )
        .exists()
    )
    session.execute(
        delete(MovementVideoReport)
        .where(MovementVideoReport.user_id == source.id, on_target)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        update(MovementVideoReport)
        .where(MovementVideoReport.user_id == source.id)
        .values(user_id=target.id)
        .execution_options(synchronize_session=False)
    )


def _never_started(session: Session, membership: Membership) -> bool:
    """An invitation not taken up that holds nothing once its plans and bookings moved: no
    national id, no seat left (one of a class the other row booked too) and no twin at the
    external system (a bridge link would name a deleted row)."""
    if membership.status not in _NEVER_STARTED or membership.national_id_ciphertext:
        return False
    held = select(Booking.id).where(Booking.membership_id == membership.id).exists()
    linked = (
        select(EntityLink.id)
        .where(
            EntityLink.organization_id == membership.organization_id,
            EntityLink.platform_id == str(membership.id),
            EntityLink.entity_type.in_((EntityType.member, EntityType.staff)),
        )
        .exists()
    )
    return not session.scalar(select(held | linked))


def _trade_places(
    session: Session, goes_on: Membership, gives_way: Membership, source: User, *, now: datetime
) -> None:
    """The source's membership takes the target's place and the target's the retired row's,
    kept whole (one membership a person and gym: a row that holds neither, for the swap)."""
    target_id = gives_way.user_id
    holder = User(signup_origin="fold", created_at=now, updated_at=now, deleted_at=now)
    session.add(holder)
    session.flush()
    goes_on.user_id = holder.id
    session.flush()
    gives_way.user_id = source.id
    session.flush()
    goes_on.user_id = target_id
    session.flush()
    session.delete(holder)
    session.flush()


def _fold_membership(
    session: Session, source: Membership, kept: Membership, *, now: datetime
) -> tuple[Membership, Membership, list[uuid.UUID], list[uuid.UUID]]:
    """The source membership's plans and bookings move to the kept one, so ending or deleting the
    emptied source takes nothing with it (but a booking of a session the kept one booked too:
    the person holds one seat of it). Returns both and the ids moved, for the
    bridge's mirror (their copies there stand at the source's external user)."""
    plans = session.scalars(
        update(Subscription)
        .where(Subscription.membership_id == source.id)
        .values(membership_id=kept.id, updated_at=now)
        .returning(Subscription.id)
    ).all()
    booked = select(Booking.class_session_id).where(Booking.membership_id == kept.id)
    seats = session.scalars(
        update(Booking)
        .where(Booking.membership_id == source.id, Booking.class_session_id.not_in(booked))
        .values(membership_id=kept.id, user_id=kept.user_id, updated_at=now)
        .returning(Booking.id)
        .execution_options(synchronize_session="fetch")
    ).all()
    session.flush()
    return source, kept, list(plans), list(seats)


def _keep_role(session: Session, source: Membership, kept: Membership, *, now: datetime) -> None:
    """Both rows are active members of the gym: the one that goes on holds the higher role of
    the two (a link lowers no one: a coach the gym invited stays a coach, an owner the owner),
    and the dropped one's live sales grant where it has none."""
    if source.role.rank > kept.role.rank:
        kept.role = source.role
        kept.updated_at = now
    live = select(SalesGrant.id).where(
        SalesGrant.membership_id == kept.id, SalesGrant.revoked_at.is_(None)
    )
    if session.scalar(live) is None:
        session.execute(
            update(SalesGrant)
            .where(SalesGrant.membership_id == source.id, SalesGrant.revoked_at.is_(None))
            .values(membership_id=kept.id)
        )


HELD_TWICE = "held_twice"
_HELD = (SubscriptionStatus.active, SubscriptionStatus.scheduled)


def _move_plans(session: Session, source: User, target: User, *, now: datetime) -> None:
    """The source's plans become the target's, but a live hold of a recurring plan the target
    holds too (one holder a plan, uq_subscriptions_plan_held): it stays on the retired row,
    where staff see it by its membership, rather than the link failing, and it stops taking
    the person's money a second time for one plan (_held_twice)."""
    holding = (  # the index's own predicate (models.billing.PLAN_HELD_WHERE)
        Subscription.status.in_(_HELD)
        & Subscription.deleted_at.is_(None)
        & (Subscription.plan_type == PlanType.card)
        & Subscription.interval_months.is_not(None)
    )
    held = select(Subscription.plan_id).where(Subscription.user_id == target.id, holding)
    twice = session.scalars(
        select(Subscription.id)
        .where(Subscription.user_id == source.id, holding, Subscription.plan_id.in_(held))
        .order_by(Subscription.id)
    ).all()
    session.execute(
        update(Subscription)
        .where(Subscription.user_id == source.id, ~(holding & Subscription.plan_id.in_(held)))
        .values(user_id=target.id)
    )
    for subscription_id in twice:
        _held_twice(session, subscription_id, target, now=now)


def _held_twice(
    session: Session, subscription_id: uuid.UUID, target: User, *, now: datetime
) -> None:
    """The retired row's hold of a plan the person holds on the kept row too. One never paid
    (a presale waiting for its opening day, a page not completed; the retired row's when both
    are) is withdrawn, its place back: it would charge the person a second time. Both paid:
    the retired row's renews no more (its renewal end is its period end: an attempt settling
    after the link grants no further renewal either), the lifecycle ends it when its paid
    period runs out, and the staff are given a task to return what the gym owes for the
    overlap. With a charge on its way for either (a pending attempt, an open page), nothing is
    ended under it: the staff's task says so. The kept row's hold ended meanwhile: the retired
    row's is the person's one hold, and follows them."""
    kept_id = session.scalar(
        select(Subscription.id).where(
            Subscription.user_id == target.id,
            Subscription.plan_id
            == select(Subscription.plan_id)
            .where(Subscription.id == subscription_id)
            .scalar_subquery(),
            Subscription.status.in_(_HELD),
            Subscription.deleted_at.is_(None),
        )
    )
    held = sorted({subscription_id, *([kept_id] if kept_id else [])})
    rows = {row_id: lock_subscription(session, row_id, may_end_at=now) for row_id in held}
    subscription, kept = rows[subscription_id], rows.get(kept_id)
    if subscription is None or subscription.status not in _HELD:
        return
    if kept is None or kept.status not in _HELD:
        subscription.user_id = target.id
        return
    if charge_in_flight(session, subscription, now) or charge_in_flight(session, kept, now):
        _held_twice_task(
            session, subscription, kept, target, now=now,
            detail="a charge is on its way for one of them: once it settles, end the one the "
            "person should not keep and refund what it took",
        )  # fmt: skip
        return
    unpaid = next(
        (row for row in (subscription, kept) if row.status == SubscriptionStatus.scheduled), None
    )
    if unpaid is not None:
        other = kept if unpaid is subscription else subscription
        lock_plans(session, [unpaid.plan_id])
        end_plan(session, unpaid, reason=HELD_TWICE, now=now, keptSubscriptionId=str(other.id))
        if unpaid is kept:  # the paid one follows the person now that it is the only hold
            session.flush()
            subscription.user_id = target.id
        return
    subscription.renewal_end = subscription.current_period_end
    subscription.next_charge_date = None
    subscription.updated_at = now
    mirror.subscription_changed(session, subscription, now=now)
    emit(
        session,
        EventKind.audit,
        "subscription.renewal_stopped",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        payload={"reason": HELD_TWICE, "keptSubscriptionId": str(kept.id),
                 "endsAt": subscription.current_period_end.isoformat()},
    )  # fmt: skip
    _held_twice_task(
        session, subscription, kept, target, now=now,
        detail="this hold renews no more and ends on "
        f"{subscription.current_period_end.date().isoformat()}: refund the days both paid "
        "for, if the gym owes them",
    )  # fmt: skip


def _held_twice_task(
    session: Session,
    subscription: Subscription,
    kept: Subscription,
    target: User,
    *,
    now: datetime,
    detail: str,
) -> None:
    file_task(
        session,
        organization_id=subscription.organization_id,
        kind="plan_held_twice",
        subject_type="subscription",
        subject_id=str(subscription.id),
        title="Two rows of one person held one plan: return what the overlap took",
        priority="normal",
        due_at=None,
        now=now,
        detail=f"the person's rows were linked and both held this plan; {detail}",
        data={"subscriptionId": str(subscription.id), "keptSubscriptionId": str(kept.id)},
        linked_user_id=target.id,
    )


def _person_columns() -> list[Any]:
    """Every column that names a user, but those of _NOT_MOVED and the plans' (_move_plans)."""
    users = User.__table__
    return [
        column
        for table in Base.metadata.sorted_tables
        if table.name not in _NOT_MOVED and table is not Subscription.__table__
        for column in table.c
        if any(fk.column.table is users for fk in column.foreign_keys)
    ]
