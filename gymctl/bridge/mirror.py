"""Which platform change becomes which sync op: the one place that decides (spec B 1, 2.6).

Areas call one function here in the transaction of their change, and build no payload
themselves; a rolled-back change takes its ops with it. Nothing is queued for an organization
without a bridge (never connected, or disconnected).

Memberships and bookings are mirrored by state, not by event: the function compares what the
platform row means for the external system now (a live bridge membership with its dates, held,
ended; booked or not) with the state the last queued op of that entity left, and queues only
the difference. So a repeated call queues nothing, a revived booking is booked again, and a
change of dates is one membership.update (which replaces a waiting one). The comparison runs
under the aggregate's lock (PostgreSQL), so two transactions cannot both queue the same step.

Every op about one member shares its aggregate (see payloads): the external user, then the
bridge membership, then bookings reach the external system in the platform's order. A member
who existed before the gym connected is mirrored at its first change (user.create first).
Across members, a booking.create whose seat may still be held at the external system by a
cancel not yet sent waits until enough of those cancels went to free one seat (see
`_class_key`).
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import bindparam, exists, func, select
from sqlalchemy import update as sa_update
from sqlalchemy.orm import Session

from gymctl.bridge import entity_map, queue
from gymctl.bridge.payloads import dump, member_key, parse_payload
from gymctl.bridge.polling import timezone_of
from gymctl.db import advisory_lock, is_postgres
from gymctl.models import (
    Booking,
    BookingStatus,
    ClassSession,
    Membership,
    MembershipStatus,
    Role,
    User,
)
from gymctl.models.billing import Subscription, SubscriptionStatus
from gymctl.models.bridge import (
    UNFINISHED,
    WAITING,
    EntityLink,
    EntityType,
    IntegrationConnection,
    OpStatus,
    OpType,
    SyncOp,
)

BRIDGED = (SubscriptionStatus.active, SubscriptionStatus.past_due, SubscriptionStatus.debt)
MEMBERSHIP_OPS = (
    OpType.membership_assign,
    OpType.membership_update,
    OpType.membership_hold,
    OpType.membership_cancel,
)
BOOKING_OPS = (OpType.booking_create, OpType.booking_cancel)
# Ops whose state no longer counts: replaced by a newer one, or given up by an operator.
_GONE = (OpStatus.superseded, OpStatus.dismissed)


# connected's question, built once: every renewal a gym collects asks it.
_CONNECTION_STATUS = select(IntegrationConnection.status).where(
    IntegrationConnection.organization_id == bindparam("organization_id")
)


def connected(session: Session, organization_id: uuid.UUID) -> bool:
    """A bridge is set up and not disconnected (a pending key check or a refused key still
    queue: the ops wait for the connection, nothing the gym does meanwhile is lost). Only the
    status is read: most gyms have no bridge, and each renewal asks."""
    status = session.scalar(_CONNECTION_STATUS, {"organization_id": organization_id})
    return status in queue.QUEUEING


# -- members ----------------------------------------------------------------------------------


def _member_payload(membership: Membership, user: User) -> dict[str, Any]:
    """The external system's user fields. No name: the part of the address before the @."""
    name = (user.name or "").strip() or (user.email or "member").split("@")[0]
    first, _, last = name.partition(" ")
    payload = {"memberId": str(membership.id), "firstName": first[:200],
               "lastName": last.strip()[:200]}  # fmt: skip
    if user.email:
        payload["email"] = user.email
    return payload


def _mirrored(session: Session, membership: Membership) -> bool:
    """The member has an external user, or one is on its way (a create an erasure withdrew
    before it was sent is not: access.erasure)."""
    key = f"user.create:{membership.id}"
    return bool(
        session.scalar(
            select(
                exists().where(SyncOp.dedupe_key == key, SyncOp.status != OpStatus.superseded)
                | exists().where(
                    EntityLink.organization_id == membership.organization_id,
                    EntityLink.entity_type == EntityType.member,
                    EntityLink.platform_id == str(membership.id),
                )
            )
        )
    )


def member_created(session: Session, membership: Membership, *, now: datetime) -> None:
    """A member joined (desk registration, import, join link, accepted invitation): the
    external user is searched for, else created. Staff are not mirrored. A member who comes
    back (their membership row again) has their external user already: when their leaving
    deactivated it there (member_retired), it is made active again with their current name
    and email."""
    if membership.role is not Role.member or membership.status is not MembershipStatus.active:
        return
    if not connected(session, membership.organization_id):
        return
    session.flush()
    user = session.get(User, membership.user_id)
    if _mirrored(session, membership):
        _reactivate(session, membership, user, now=now)
        return
    payload = _member_payload(membership, user)
    op = queue.enqueue(
        session,
        organization_id=membership.organization_id,
        op_type=OpType.user_create,
        payload=payload,
        now=now,
        dedupe_key=f"user.create:{membership.id}",
    )
    if op is not None and op.status is OpStatus.superseded:
        # Withdrawn by an erasure before it was sent; the member is back: it goes after all,
        # with their details now (one create a member: every check reads it by its key). A
        # deactivation the erasure left to find a user that create may have made is moot.
        op.payload = dump(parse_payload(OpType.user_create, payload))
        op.status, op.run_after = OpStatus.pending, now
        op.superseded_by_id = op.completed_at = op.issue_code = op.last_error = None
        op.updated_at = now
        for waiting in _user_ops(session, membership, (*WAITING, OpStatus.parked)):
            if waiting.op_type is OpType.user_update:
                _withdraw(waiting, now=now, superseded_by=op.id)
        session.flush()


def _ensure_member(session: Session, membership: Membership, *, now: datetime) -> None:
    if not _mirrored(session, membership):
        member_created(session, membership, now=now)


def member_updated(session: Session, user: User, *, now: datetime) -> None:
    """The person's name or email changed: each gym that mirrors them gets a user.update (a
    waiting one is replaced: it carries the whole current state)."""
    memberships = session.scalars(
        select(Membership).where(
            Membership.user_id == user.id,
            Membership.role == Role.member,
            Membership.status == MembershipStatus.active,
        )
    )
    for membership in memberships:
        if not connected(session, membership.organization_id):
            continue
        if not _mirrored(session, membership):
            member_created(session, membership, now=now)
            continue
        payload = _member_payload(membership, user)
        activation = _activation(session, membership)
        if _deactivated(activation):
            # Retired there while its membership reads active (its gym was deleted): the
            # details wait for the member's return (member_created sends them).
            continue
        if activation is not None:
            # It replaces a waiting user.update, which may be the reactivation of a member who
            # came back: it carries that state too (the member is active).
            payload["active"] = True
        queue.enqueue(
            session,
            organization_id=membership.organization_id,
            op_type=OpType.user_update,
            payload=payload,
            now=now,
        )


# -- a member who leaves, and comes back ------------------------------------------------------

_DEACTIVATE, _REACTIVATE = "user.deactivate", "user.reactivate"


def _activation(session: Session, membership: Membership) -> SyncOp | None:
    """The member's last user.update standing that set their external user's active flag (a
    deactivation or a reactivation), under the aggregate's lock; None when none did."""
    if is_postgres(session):
        advisory_lock(session, f"bridge:aggregate:{member_key(membership.id)}")
    ops = session.scalars(
        select(SyncOp)
        .where(
            SyncOp.organization_id == membership.organization_id,
            SyncOp.aggregate_key == member_key(membership.id),
            SyncOp.op_type == OpType.user_update,
            SyncOp.status.not_in(_GONE),
        )
        .order_by(SyncOp.id.desc())
    )
    return next((op for op in ops if "active" in op.payload), None)


def _deactivated(op: SyncOp | None) -> bool:
    return op is not None and op.payload.get("active") is False


def _flag_count(session: Session, membership: Membership, prefix: str) -> int:
    """How many ops of the kind the member had: the next one's dedupe key."""
    return session.scalar(
        select(func.count())
        .select_from(SyncOp)
        .where(
            SyncOp.organization_id == membership.organization_id,
            SyncOp.aggregate_key == member_key(membership.id),
            SyncOp.dedupe_key.startswith(f"{prefix}:{membership.id}:"),
        )
    )


def _reactivate(session: Session, membership: Membership, user: User, *, now: datetime) -> None:
    """The member came back: an external user their leaving deactivated (or was about to) is
    made active again, carrying their current name and email. It replaces a deactivation not
    yet sent, and one parked as external_user_in_use (moot: the member is back)."""
    last = _activation(session, membership)
    if not _deactivated(last):
        return
    count = _flag_count(session, membership, _REACTIVATE)
    op = queue.enqueue(
        session,
        organization_id=membership.organization_id,
        op_type=OpType.user_update,
        payload={**_member_payload(membership, user), "active": True},
        now=now,
        dedupe_key=f"{_REACTIVATE}:{membership.id}:{count}",
    )
    if op is not None and last.status is OpStatus.parked:
        last.status, last.superseded_by_id = OpStatus.superseded, op.id
        last.completed_at = last.updated_at = now
        session.flush()


# -- state comparison -------------------------------------------------------------------------


def _last_op(
    session: Session, organization_id: uuid.UUID, key: str, types, field: str, entity_id: Any
) -> tuple[SyncOp | None, int]:
    """The last op of the entity still standing, and how many ops it had (for dedupe keys)."""
    if is_postgres(session):
        advisory_lock(session, f"bridge:aggregate:{key}")
    ops = list(
        session.scalars(
            select(SyncOp)
            .where(
                SyncOp.organization_id == organization_id,
                SyncOp.aggregate_key == key,
                SyncOp.op_type.in_(types),
                SyncOp.payload[field].as_string() == str(entity_id),
            )
            .order_by(SyncOp.id)
        )
    )
    standing = [op for op in ops if op.status not in _GONE]
    return (standing[-1] if standing else None), len(ops)


def _enqueue(
    session: Session,
    organization_id: uuid.UUID,
    op_type: OpType,
    payload,
    now,
    dedupe: str,
    class_key: str | None = None,
) -> None:
    queue.enqueue(
        session,
        organization_id=organization_id,
        op_type=op_type,
        payload=payload,
        now=now,
        dedupe_key=dedupe,
        class_key=class_key,
    )


# -- the bridge membership --------------------------------------------------------------------


def _local_date(at: datetime | None, zone: ZoneInfo) -> date | None:
    return at.astimezone(zone).date() if at is not None else None


def bridge_state(subscription: Subscription, zone: ZoneInfo) -> tuple[str, dict[str, Any]]:
    """What the subscription means at the external system: ("live", dates), ("held", {}) or
    ("none", {}). Dates are the gym's local days; an open-ended plan's membership has no end
    until a notice gives it one (a monthly roll is not a change there)."""
    if subscription.status is SubscriptionStatus.paused:
        return "held", {}
    if subscription.status not in BRIDGED or subscription.deleted_at is not None:
        return "none", {}
    start = subscription.started_at or subscription.current_period_start or subscription.created_at
    if subscription.cancel_at_period_end and subscription.cancellation_effective_at:
        end = subscription.cancellation_effective_at
    elif subscription.open_ended:
        end = None
    else:
        end = subscription.current_period_end
    dates = {"startDate": _local_date(start, zone).isoformat()}
    if end is not None:
        dates["endDate"] = _local_date(end, zone).isoformat()
    return "live", dates


def _membership_state(op: SyncOp | None) -> tuple[str, dict[str, Any]]:
    if op is None or op.op_type is OpType.membership_cancel:
        return "none", {}
    if op.op_type is OpType.membership_hold:
        return "held", {}
    dates = {k: op.payload[k] for k in ("startDate", "endDate") if k in op.payload}
    return "live", dates


def subscription_changed(session: Session, subscription: Subscription, *, now: datetime) -> None:
    """A platform subscription started, changed its dates, was frozen or ended: its free
    bridge membership follows (assign, update, hold, cancel)."""
    organization_id = subscription.organization_id
    if not connected(session, organization_id):
        return
    session.flush()
    membership = session.get(Membership, subscription.membership_id)
    if membership is None:
        return
    want, dates = bridge_state(subscription, timezone_of(session, organization_id))
    last, count = _last_op(
        session,
        organization_id,
        member_key(membership.id),
        MEMBERSHIP_OPS,
        "subscriptionId",
        subscription.id,
    )
    if membership.role is not Role.member and last is None:
        return  # staff are not mirrored; what was mirrored of a member made staff still follows
    have, had_dates = _membership_state(last)
    if want == "live" and have != "live":
        _ensure_member(session, membership, now=now)
        op_type = OpType.membership_assign
    elif want == "live" and dates != had_dates:
        op_type = OpType.membership_update
    elif want == "held" and have == "live":
        op_type = OpType.membership_hold
    elif want == "none" and have != "none":
        op_type = OpType.membership_cancel
    else:
        return
    if want != "live":  # the payload names the dates the membership last had
        dates = had_dates or {"startDate": _local_date(now, ZoneInfo("UTC")).isoformat()}
    payload = {"memberId": str(membership.id), "subscriptionId": str(subscription.id), **dates}
    dedupe = f"{op_type.value}:{membership.id}:{subscription.id}:{count}"
    _enqueue(session, organization_id, op_type, payload, now, dedupe)


def subscriptions_moved(session: Session, *, now: datetime) -> int:
    """After a set-based lifecycle pass: each subscription it moved at `now`, of a gym with a
    bridge, is compared like any other change. Returns how many were looked at."""
    session.flush()
    bridged = list(
        session.scalars(
            select(IntegrationConnection.organization_id).where(
                IntegrationConnection.status.in_(queue.QUEUEING)
            )
        )
    )
    if not bridged:  # no gym has a bridge: the pass's rows need no look
        return 0
    rows = list(
        session.scalars(
            select(Subscription)
            .where(Subscription.organization_id.in_(bridged), Subscription.updated_at == now)
            .order_by(Subscription.id)
        )
    )
    for row in rows:
        subscription_changed(session, row, now=now)
    return len(rows)


# -- bookings ---------------------------------------------------------------------------------


def _class_key(session: Session, booking: Booking, op_type: OpType) -> tuple[str | None, int]:
    """The class session's key, by which a booking.create waits for the class's earlier
    booking.cancel ops on their way, and how many of them it may pass (spare seats).

    Every cancel carries the key (a create may need its seat). A create carries it only when
    its seat may still be taken at the external system: the class's confirmed seats (this one
    included) plus its cancels not yet sent exceed its capacity. Otherwise the external class
    has room whatever order the ops go in (it holds at most the seats sent and not yet
    cancelled), and the create waits for no one. A create that carries it needs one seat, not
    every cancel: it may go while at most `capacity - confirmed` of those cancels are still on
    their way (each holds at most one seat there). A parked cancel counts here, so that if an
    operator retries it the order holds again; while parked it holds no one (queue.blocked)."""
    key = f"class:{booking.class_session_id}"
    if op_type is OpType.booking_cancel:
        return key, 0
    capacity = session.scalar(
        select(ClassSession.capacity).where(ClassSession.id == booking.class_session_id)
    )
    confirmed = session.scalar(
        select(func.count())
        .select_from(Booking)
        .where(
            Booking.class_session_id == booking.class_session_id,
            Booking.status == BookingStatus.confirmed,
            Booking.deleted_at.is_(None),
        )
    )
    unsent_cancels = session.scalar(
        select(func.count())
        .select_from(SyncOp)
        .where(
            SyncOp.class_key == key,
            SyncOp.op_type == OpType.booking_cancel,
            SyncOp.status.in_(UNFINISHED),
        )
    )
    spare = max(capacity - confirmed, 0)
    return (key if unsent_cancels > spare else None), spare


def booking_changed(session: Session, booking: Booking, *, now: datetime) -> None:
    """A booking was made, promoted from the waitlist, cancelled or removed (by the member or
    staff): the external booking follows. Only a confirmed seat is mirrored; a waitlisted one
    reaches the external system when it is promoted."""
    organization_id = booking.organization_id
    if not connected(session, organization_id):
        return
    session.flush()
    membership = session.get(Membership, booking.membership_id)
    if membership is None:
        return
    booked = booking.status is BookingStatus.confirmed and booking.deleted_at is None
    key = member_key(booking.membership_id)
    last, count = _last_op(session, organization_id, key, BOOKING_OPS, "bookingId", booking.id)
    if membership.role is not Role.member and last is None:
        # Staff booking themselves in are not mirrored; a seat booked there while they were a
        # member is still given up there (a role change left it booked for ever).
        return
    was_booked = last is not None and last.op_type is OpType.booking_create
    if booked == was_booked:
        return
    if booked:
        _ensure_member(session, membership, now=now)
    op_type = OpType.booking_create if booked else OpType.booking_cancel
    payload = {"memberId": str(booking.membership_id), "bookingId": str(booking.id),
               "sessionId": str(booking.class_session_id)}  # fmt: skip
    class_key, spare = _class_key(session, booking, op_type)
    if class_key is not None and op_type is OpType.booking_create:
        payload["spareSeats"] = spare
    dedupe = f"{op_type.value}:{booking.membership_id}:{booking.id}:{count}"
    _enqueue(session, organization_id, op_type, payload, now, dedupe, class_key)


def class_relinked(session: Session, class_session: ClassSession, *, now: datetime) -> int:
    """The owner linked a class session to another external class (classes.link_class): each
    seat sent to the old one is booked again, which moves it (operations.booking_create books
    the new class, then cancels the registration at the class the session no longer books
    into). A seat not sent yet goes to the new class anyway; a class held or called off is
    history, left be. How many seats move."""
    organization_id = class_session.organization_id
    if class_session.starts_at <= now or class_session.cancelled_at is not None:
        return 0
    if not connected(session, organization_id):
        return 0
    session.flush()
    seats = session.scalars(
        select(Booking)
        .where(
            Booking.class_session_id == class_session.id,
            Booking.status == BookingStatus.confirmed,
            Booking.deleted_at.is_(None),
        )
        .order_by(Booking.created_at, Booking.id)
    ).all()
    moved = 0
    for booking in seats:
        key = member_key(booking.membership_id)
        last, count = _last_op(session, organization_id, key, BOOKING_OPS, "bookingId", booking.id)
        if last is None or last.op_type is not OpType.booking_create:
            continue
        op_type = OpType.booking_create
        payload = {"memberId": str(booking.membership_id), "bookingId": str(booking.id),
                   "sessionId": str(booking.class_session_id)}  # fmt: skip
        class_key, spare = _class_key(session, booking, op_type)
        if class_key is not None:
            payload["spareSeats"] = spare
        dedupe = f"{op_type.value}:{booking.membership_id}:{booking.id}:{count}"
        _enqueue(session, organization_id, op_type, payload, now, dedupe, class_key)
        moved += 1
    return moved


# -- a fold -----------------------------------------------------------------------------------


def member_folded(session: Session, source: Membership, kept: Membership, *, now: datetime) -> None:
    """A fold ended `source` and keeps `kept`, both the person's in one gym (access.folding).
    The external user that stood for the source is the person's: it now stands for the kept
    member when that one has none (its own user.create found that user, the source's, and
    parked as identity_conflict; it is sent again and finds it linked). So the kept member's
    plans and seats reach the person there, and a booking the person makes there is theirs.
    It then carries the kept member's name and email (a user.update, which also replaces the
    source's waiting ones: they would carry the retired row's details)."""
    organization_id = kept.organization_id
    if kept.role is not Role.member or not connected(session, organization_id):
        return
    session.flush()
    twin = entity_map.find(session, organization_id, EntityType.member, source.id)
    if twin is None or entity_map.find(session, organization_id, EntityType.member, kept.id):
        return
    if is_postgres(session):  # the kept member's ops decide on this link: under their lock
        advisory_lock(session, f"bridge:aggregate:{member_key(kept.id)}")
    twin.platform_id, twin.updated_at = str(kept.id), now
    waiting = session.scalar(  # under its lock, as it stands (classes.link_class)
        select(SyncOp)
        .where(SyncOp.dedupe_key == f"user.create:{kept.id}", SyncOp.status == OpStatus.parked)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if waiting is not None:
        queue.retry(session, waiting.id, now=now)
    session.flush()
    update = queue.enqueue(
        session,
        organization_id=organization_id,
        op_type=OpType.user_update,
        payload=_member_payload(kept, session.get(User, kept.user_id)),
        now=now,
    )
    if update is not None:
        session.execute(
            sa_update(SyncOp)
            .where(
                SyncOp.aggregate_key == member_key(source.id),
                SyncOp.op_type == OpType.user_update,
                SyncOp.status.in_(WAITING),
            )
            .values(
                status=OpStatus.superseded,
                superseded_by_id=update.id,
                completed_at=now,
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        )


def member_retired(session: Session, source: Membership, *, now: datetime) -> None:
    """`source` ended: removed by staff, erased, its login deleted, its gym deleted
    (access.leaving.end_holdings, after its plans and seats ended), or a fold ended it, its
    person going on as another member (access.folding, after holdings_moved and the seats of
    classes the kept member holds too, which end_holdings gives up). An external user
    that still stands for it names no one the gym serves: it is deactivated there (a
    user.update with active false; spec B 4.6 writes no deletes), after the plans and seats
    given up there (earlier ops of its aggregate), and parked as external_user_in_use while
    the gym's own memberships still live on it. The link is kept (marked deactivated): a
    member who comes back is made active again (member_created). A user.create still on its
    way, or parked, is followed: the deactivation waits behind it, so a parked one the owner
    retries is deactivated once it went, and one the owner dismisses (it may have made the user
    there: a timeout after the write) lets the deactivation search for it. With no link, the
    deactivation carries the create's address for that search, the bridge's lookup key (as
    member_erased does; operations.user_update), dropped once it was sent or dismissed;
    otherwise it stores the member id and the flag alone, and sends nothing else. Erasure keeps
    it either way (member_erased)."""
    organization_id = source.organization_id
    if not connected(session, organization_id):
        return
    session.flush()
    linked = entity_map.find(session, organization_id, EntityType.member, source.id)
    create = session.scalar(
        select(SyncOp).where(
            SyncOp.dedupe_key == f"user.create:{source.id}",
            SyncOp.status.in_((*WAITING, OpStatus.in_flight, OpStatus.parked)),
        )
    )
    if linked is None and create is None:
        return
    if _deactivated(_activation(session, source)):
        return  # already on its way, or done: a second end (a fold's, then its holdings')
    lookup = {}
    if linked is None and "email" in create.payload:
        lookup = {"email": create.payload["email"]}
    count = _flag_count(session, source, _DEACTIVATE)
    queue.enqueue(
        session,
        organization_id=organization_id,
        op_type=OpType.user_update,
        payload={"memberId": str(source.id), "active": False, **lookup},
        now=now,
        dedupe_key=f"{_DEACTIVATE}:{source.id}:{count}",
    )


# -- an erased member -------------------------------------------------------------------------


def _user_ops(session: Session, membership: Membership, statuses=None) -> list[SyncOp]:
    """The member's user.create and user.update ops (in `statuses`), in queue order, locked and
    read as they are: a dispatcher's claim (SKIP LOCKED) takes none of them while the caller
    rewrites them, and one it claimed just before reads in flight, its worker's."""
    query = select(SyncOp).where(
        SyncOp.organization_id == membership.organization_id,
        SyncOp.aggregate_key == member_key(membership.id),
        SyncOp.op_type.in_((OpType.user_create, OpType.user_update)),
    )
    if statuses is not None:
        query = query.where(SyncOp.status.in_(statuses))
    query = query.order_by(SyncOp.id).with_for_update()
    return list(session.scalars(query.execution_options(populate_existing=True)))


def _scrubbed(payload: dict[str, Any]) -> dict[str, Any]:
    """A user op's payload without personal data: the member id and the active flag, which
    the mirror reads (_activation)."""
    return {k: v for k, v in payload.items() if k in ("memberId", "active")}


def _withdraw(op: SyncOp, *, now: datetime, superseded_by: int | None = None) -> None:
    op.status, op.superseded_by_id = OpStatus.superseded, superseded_by
    op.payload = _scrubbed(op.payload)
    op.completed_at = op.updated_at = now


def member_erased(session: Session, membership: Membership, *, now: datetime) -> int:
    """The member's personal data was erased (access.erasure, after their membership ended and
    member_retired queued their deactivation). No user op of theirs keeps their name or
    address: the unsent ones are withdrawn, never sent, and every one is scrubbed to the
    member id and the flag. One in flight is its worker's (the deactivation follows it): it is
    scrubbed too, and withdrawn by its dispatcher unless that attempt succeeds (queue.record).

    An external user may stand for them when they are linked, or their create is in flight or
    was attempted (a timeout after the write there): then the deactivation goes, and without a
    link it carries the create's address, the bridge's lookup key, to search for that user
    there (operations.user_update; the address is dropped once it was sent). Otherwise the
    deactivation is withdrawn too: a rejoin would find it waiting. Returns the ops withdrawn."""
    if is_postgres(session):
        advisory_lock(session, f"bridge:aggregate:{member_key(membership.id)}")
    ops = _user_ops(session, membership)
    create = next((op for op in ops if op.dedupe_key == f"user.create:{membership.id}"), None)
    linked = entity_map.find(session, membership.organization_id, EntityType.member, membership.id)
    attempted = create is not None and (create.status is OpStatus.in_flight or create.attempts > 0)
    lookup = {}
    if linked is None and attempted and "email" in create.payload:
        lookup = {"email": create.payload["email"]}
    deactivation = next(
        (op for op in reversed(ops)
         if (op.dedupe_key or "").startswith(f"{_DEACTIVATE}:") and op.status in UNFINISHED),
        None,
    )  # fmt: skip
    withdrawn = 0
    for op in ops:
        if op.status is OpStatus.in_flight:
            # Its worker sends the copy it holds (that attempt has left); none is stored to be
            # sent again: an attempt that does not succeed withdraws it (queue.record).
            if op.payload.get("active") is not False:
                op.payload = _scrubbed(op.payload)
            continue
        if op is deactivation and (linked is not None or attempted):
            op.payload = {**_scrubbed(op.payload), **lookup}
        elif op.status in UNFINISHED:
            _withdraw(op, now=now)
            op.last_error = "withdrawn: personal data erased"
            withdrawn += 1
        else:
            op.payload = _scrubbed(op.payload)
    if attempted and linked is None and deactivation is None:
        # Its create had parked (member_retired leaves that to the owner): withdrawn above.
        count = _flag_count(session, membership, _DEACTIVATE)
        queue.enqueue(
            session,
            organization_id=membership.organization_id,
            op_type=OpType.user_update,
            payload={"memberId": str(membership.id), "active": False, **lookup},
            now=now,
            dedupe_key=f"{_DEACTIVATE}:{membership.id}:{count}",
        )
    session.flush()
    return withdrawn


def holdings_moved(
    session: Session,
    organization_id: uuid.UUID,
    source_id: uuid.UUID,
    subscription_ids: list[uuid.UUID],
    booking_ids: list[uuid.UUID],
    *,
    now: datetime,
) -> None:
    """A fold moved plans and seats from membership `source_id` to the one that goes on
    (access.folding). Their copies at the external system stand at the source's external user:
    each ends there, in the source's order, and is mirrored again under the member that holds
    it now (its own order; the kept member's assign or booking also ends a copy still standing
    at the other user, so either order ends right: see operations). Dedupe keys name the member,
    so the kept member's first op of a moved row is not taken for the source's."""
    if not (subscription_ids or booking_ids) or not connected(session, organization_id):
        return
    session.flush()
    key = member_key(source_id)
    for subscription_id in subscription_ids:
        last, count = _last_op(session, organization_id, key, MEMBERSHIP_OPS, "subscriptionId",
                               subscription_id)  # fmt: skip
        have, dates = _membership_state(last)
        if have != "none":
            op_type = OpType.membership_cancel
            dates = dates or {"startDate": _local_date(now, ZoneInfo("UTC")).isoformat()}
            payload = {"memberId": str(source_id), "subscriptionId": str(subscription_id),
                       **dates}  # fmt: skip
            dedupe = f"{op_type.value}:{source_id}:{subscription_id}:{count}"
            _enqueue(session, organization_id, op_type, payload, now, dedupe)
        subscription_changed(session, session.get(Subscription, subscription_id), now=now)
    for booking_id in booking_ids:
        booking = session.get(Booking, booking_id)
        held = session.get(ClassSession, booking.class_session_id)
        if held.starts_at <= now or held.cancelled_at is not None:
            continue  # a class held or called off: its registration there is history, left be
        last, count = _last_op(session, organization_id, key, BOOKING_OPS, "bookingId", booking_id)
        if last is not None and last.op_type is OpType.booking_create:
            op_type = OpType.booking_cancel
            payload = {"memberId": str(source_id), "bookingId": str(booking_id),
                       "sessionId": str(booking.class_session_id)}  # fmt: skip
            class_key, _spare = _class_key(session, booking, op_type)
            dedupe = f"{op_type.value}:{source_id}:{booking_id}:{count}"
            _enqueue(session, organization_id, op_type, payload, now, dedupe, class_key)
        booking_changed(session, booking, now=now)
