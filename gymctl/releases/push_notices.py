"""Push fanout (spec A 6.4): what a member must know now reaches the devices their gym's app
registered, in the language the app registered with. What they may never see before the class
otherwise: a waitlisted booking promoted to a seat (`booking.promoted`), and a seat or a place
in line lost without their asking (`booking.cancelled` because staff cancelled the class, the
waitlist closed at its start, or the plan that paid it ended; staff cancelling or removing the
booking). A booking the member cancelled themselves is never pushed (the event's actor is its
member). Delivery revalidates each registration at send time (`push.deliver`).

Each event is pushed once in normal operation, keyed by its outbox id (`push_notices`), in
three steps so that no transaction is open while the push service answers (on the embedded
default one would hold every writer of every process: decision s42): the event's record is
claimed and committed (`sent` is CLAIMED, `created_at` the claim's instant), the devices are
pushed, and what they reached is written to the claimed record in a short transaction. A
provider error deletes the claim: the next run tries again. A claim a stopped run left (killed
between its claim and its outcome) is taken again once LEASE has passed, so a push is never
lost and is at least once: a stop before the push delays it, a stop after it pushes that event
twice. An outcome is written only to the run's own claim (the record's id), so a run whose
claim was taken over changes nothing. Nothing false or idle is pushed, only recorded: a
promotion whose booking is no longer a confirmed seat of a class still ahead (the member
cancelled meanwhile, the class was cancelled or has begun), a lost seat booked again since, or
one whose class is over. Events older than LOOKBACK are left alone, so a first run after an
upgrade does not push the history.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.billing.accounts import billing_settings
from gymctl.bookings.attendance import WAITLIST_CLOSED
from gymctl.bookings.book import is_active
from gymctl.bookings.cancel_class import SESSION_CANCELLED
from gymctl.clock import zone
from gymctl.db import READ_ONLY
from gymctl.events import unsettled
from gymctl.models import Booking, BookingStatus, ClassSession, ClassType, Organization, OutboxEvent
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.models.releases import PushNotice, PushRegistration
from gymctl.providers.push import PushProvider
from gymctl.releases import push
from gymctl.retention.emails import render

logger = logging.getLogger(__name__)

BATCH = 200
LOOKBACK = timedelta(days=2)
PROMOTED, CANCELLED, REMOVED = "booking.promoted", "booking.cancelled", "booking.removed"
# booking.cancelled's reasons, each told in its own words (template push_<kind>)
REASONS = {SESSION_CANCELLED: "class_cancelled", WAITLIST_CLOSED: "waitlist_closed"}
CLAIMED = -1  # `sent` of a record whose push is under way (its outcome not yet written)
LEASE = timedelta(minutes=10)  # a claim older than this was left by a stopped run


@dataclass(frozen=True)
class Claim:
    """A committed claim and what its push says (read before the claim's transaction ended)."""

    record_id: uuid.UUID
    organization_id: uuid.UUID
    user_id: uuid.UUID
    title: str
    body: str
    data: dict[str, Any]


def push_notices(
    factory: sessionmaker[Session], provider: PushProvider, *, now: datetime, limit: int = BATCH
) -> dict[str, int]:
    """Push every event `_pushed_events` selects not yet pushed, and every claim a stopped run
    left (module doc): how many reached a device, reached none (no registration may receive, or
    nothing true or of use is left to tell), failed (retried next run), or were claimed by
    another run first."""
    pending = unsettled(
        factory,
        _pushed_events(),
        PushNotice.outbox_event_id,
        since=now - LOOKBACK,
        limit=limit,
    )
    counts = {"pushed": 0, "unreached": 0, "failed": 0, "skipped": 0}
    for event_id in sorted({*_abandoned(factory, now=now, limit=limit), *pending})[:limit]:
        counts[_push_one(factory, provider, event_id, now=now)] += 1
    return counts


def _pushed_events() -> ColumnElement[bool]:
    """The events a member is pushed: every promotion; a cancel the system made (the class
    cancelled, the waitlist closed, the plan ended) or staff made; a removal of a seat still
    held. Never one whose actor is the booking's own member (their own act)."""
    payload = OutboxEvent.payload
    actor, member = payload["actorUserId"].as_string(), payload["userId"].as_string()
    by_another = or_(actor.is_(None), actor != member)
    return or_(
        OutboxEvent.name == PROMOTED,
        and_(
            OutboxEvent.name == CANCELLED,
            by_another,
            or_(
                payload["reason"].as_string().in_(REASONS),
                payload["planEnded"].as_string().is_not(None),
                actor.is_not(None),  # staff; a booking the bridge saw gone there has none
            ),
        ),
        and_(
            OutboxEvent.name == REMOVED,
            actor.is_not(None),
            actor != member,
            payload["status"].as_string() != "cancelled",  # a cancelled row tidied away
        ),
    )


def _kind(event: OutboxEvent) -> str:
    """What the push tells (its template push_<kind>) of an event `_pushed_events` selects."""
    if event.name == PROMOTED:
        return "booking_promoted"
    if event.payload.get("reason") in REASONS:
        return REASONS[event.payload["reason"]]
    return "plan_ended" if event.payload.get("planEnded") else "booking_cancelled"


def _abandoned(factory: sessionmaker[Session], *, now: datetime, limit: int) -> list[int]:
    """The events of claims older than LEASE: their run stopped before writing the outcome."""
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        return list(
            session.scalars(
                select(PushNotice.outbox_event_id)
                .where(PushNotice.sent == CLAIMED, PushNotice.created_at <= now - LEASE)
                .order_by(PushNotice.outbox_event_id)
                .limit(limit)
            )
        )


def _push_one(
    factory: sessionmaker[Session], provider: PushProvider, event_id: int, *, now: datetime
) -> str:
    """Claim (committed), push (no transaction open while the provider answers), record."""
    with factory() as session:
        try:
            claim = _claim(session, session.get(OutboxEvent, event_id), now=now)
            session.commit()
        except Exception:
            logger.exception("push of event %s failed, retried next run", event_id)
            return "failed"
        if not isinstance(claim, Claim):
            return claim
        try:
            delivered = push.deliver(
                session,
                provider,
                claim.organization_id,
                [claim.user_id],
                title=claim.title,
                body=claim.body,
                data=claim.data,
                now=now,
            )
            session.execute(
                update(PushNotice)
                .where(PushNotice.id == claim.record_id, PushNotice.sent == CLAIMED)
                .values(sent=delivered["sent"])
            )
            session.commit()
        except Exception:
            logger.exception("push of event %s failed, retried next run", event_id)
            session.rollback()
            _release(factory, claim)
            return "failed"
    return "pushed" if delivered["sent"] else "unreached"


def _release(factory: sessionmaker[Session], claim: Claim) -> None:
    """A failed push gives its claim up, so the next run tries again (if this fails too, the
    claim is taken again after LEASE)."""
    try:
        with factory() as session, session.begin():
            session.execute(
                delete(PushNotice).where(
                    PushNotice.id == claim.record_id, PushNotice.sent == CLAIMED
                )
            )
    except Exception:
        logger.exception("releasing the push claim %s failed: taken again after the lease", claim)


def _claim(session: Session, event: OutboxEvent, *, now: datetime) -> Claim | str:
    """The event's record, CLAIMED (the caller commits it), with what the push will say; or the
    outcome when nothing is to be pushed: "skipped" (another run has it) or "unreached" (the
    seat is gone: recorded as reaching no device)."""
    session.execute(
        delete(PushNotice).where(
            PushNotice.outbox_event_id == event.id,
            PushNotice.sent == CLAIMED,
            PushNotice.created_at <= now - LEASE,
        )
    )
    user_id = uuid.UUID(event.payload["userId"])
    record = PushNotice(
        id=ids.new_id(),
        outbox_event_id=event.id,
        organization_id=event.organization_id,
        user_id=user_id,
        kind=_kind(event),
        sent=CLAIMED,
        created_at=now,
    )
    try:
        with unique_violation("uq_push_notices_outbox_event_id"), session.begin_nested():
            session.add(record)
            session.flush()
    except UniqueViolation:
        return "skipped"
    found = _seat(session, event, record.kind, now=now)
    if found is None:
        record.sent = 0
        return "unreached"
    template, context = found
    title, body = render(f"push_{template}", _locale(session, event, user_id), **context)
    data = {"event": event.name, "bookingId": event.aggregate_id}
    if record.kind != "booking_promoted":
        data["notice"] = record.kind
    return Claim(
        record_id=record.id,
        organization_id=event.organization_id,
        user_id=user_id,
        title=title,
        body=body.strip(),
        data=data,
    )


def _seat(
    session: Session, event: OutboxEvent, kind: str, *, now: datetime
) -> tuple[str, dict[str, Any]] | None:
    """The template and what the push says of the event's booking while it is still true and
    of use; None otherwise (recorded, not pushed). A promotion: still a confirmed seat of a
    class that has not begun or been cancelled. A seat lost: not booked again since (a booking
    is revived under its id), and its class not over yet."""
    found = session.execute(
        select(Booking, ClassSession, ClassType)
        .join(ClassSession, ClassSession.id == Booking.class_session_id)
        .join(ClassType, ClassType.id == ClassSession.class_type_id)
        .where(Booking.id == uuid.UUID(event.aggregate_id))
    ).first()
    if found is None:
        return None
    booking, row, class_type = found
    if kind == "booking_promoted":
        true = (
            booking.status == BookingStatus.confirmed
            and booking.deleted_at is None
            and row.cancelled_at is None
            and row.starts_at > now
        )
    else:
        true = not is_active(booking) and row.ends_at > now
    if not true:
        return None
    if kind == "waitlist_closed" and row.cancelled_at is not None:
        kind = "class_cancelled"  # closed because the class was called off, not begun
    local = zone(billing_settings(session, booking.organization_id).timezone or "UTC")
    gym = session.get(Organization, booking.organization_id)
    return kind, {
        "gym": gym.name,
        "class_name": class_type.name,
        "when": f"{row.starts_at.astimezone(local):%Y-%m-%d %H:%M}",
        # a pack's session given back; not said where the plan itself ended
        "session_back": kind != "plan_ended" and "sessionReturnedTo" in event.payload,
    }


def _locale(session: Session, event: OutboxEvent, user_id: uuid.UUID) -> str | None:
    """The language of the member's latest registration with this gym's app (X-Locale)."""
    return session.scalar(
        select(PushRegistration.locale)
        .where(
            PushRegistration.user_id == user_id,
            PushRegistration.organization_id == event.organization_id,
            PushRegistration.revoked_at.is_(None),
        )
        .order_by(PushRegistration.registered_at.desc())
        .limit(1)
    )
