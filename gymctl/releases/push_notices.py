"""Push fanout (spec A 6.4): what a member must know now reaches the devices their gym's app
registered, in the language the app registered with. Today one event: a waitlisted booking
promoted to a seat (`booking.promoted`), which the member may never see before the class
otherwise. Delivery revalidates each registration at send time (`push.deliver`).

Each event is pushed once in normal operation, keyed by its outbox id (`push_notices`), in
three steps so that no transaction is open while the push service answers (on the embedded
default one would hold every writer of every process: decision s42): the event's record is
claimed and committed (`sent` is CLAIMED, `created_at` the claim's instant), the devices are
pushed, and what they reached is written to the claimed record in a short transaction. A
provider error deletes the claim: the next run tries again. A claim a stopped run left (killed
between its claim and its outcome) is taken again once LEASE has passed, so a push is never
lost and is at least once: a stop before the push delays it, a stop after it pushes that event
twice. An outcome is written only to the run's own claim (the record's id), so a run whose
claim was taken over changes nothing. A booking that is no longer a confirmed seat of a class
still ahead (the member cancelled meanwhile, the class was cancelled or has begun) is recorded
and not pushed. Events older than LOOKBACK are left alone, so a first run after an upgrade does
not push the history.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.billing.accounts import billing_settings
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
KINDS = {"booking.promoted": "booking_promoted"}  # outbox event -> template push_<kind>
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
    """Push every event of KINDS not yet pushed, and every claim a stopped run left (module
    doc): how many reached a device, reached none (no registration may receive, or the seat is
    gone), failed (retried next run), or were claimed by another run first."""
    pending = unsettled(
        factory,
        OutboxEvent.name.in_(KINDS),
        PushNotice.outbox_event_id,
        since=now - LOOKBACK,
        limit=limit,
    )
    counts = {"pushed": 0, "unreached": 0, "failed": 0, "skipped": 0}
    for event_id in sorted({*_abandoned(factory, now=now, limit=limit), *pending})[:limit]:
        counts[_push_one(factory, provider, event_id, now=now)] += 1
    return counts


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
        kind=KINDS[event.name],
        sent=CLAIMED,
        created_at=now,
    )
    try:
        with unique_violation("uq_push_notices_outbox_event_id"), session.begin_nested():
            session.add(record)
            session.flush()
    except UniqueViolation:
        return "skipped"
    context = _seat(session, uuid.UUID(event.aggregate_id), now=now)
    if context is None:
        record.sent = 0
        return "unreached"
    title, body = render(f"push_{record.kind}", _locale(session, event, user_id), **context)
    return Claim(
        record_id=record.id,
        organization_id=event.organization_id,
        user_id=user_id,
        title=title,
        body=body.strip(),
        data={"event": event.name, "bookingId": event.aggregate_id},
    )


def _seat(session: Session, booking_id: uuid.UUID, *, now: datetime) -> dict[str, Any] | None:
    """What the push says of a promoted booking, while it is still a confirmed seat of a class
    that has not begun or been cancelled; None otherwise (nothing true to tell)."""
    found = session.execute(
        select(Booking, ClassSession, ClassType)
        .join(ClassSession, ClassSession.id == Booking.class_session_id)
        .join(ClassType, ClassType.id == ClassSession.class_type_id)
        .where(Booking.id == booking_id)
    ).first()
    if found is None:
        return None
    booking, row, kind = found
    if (
        booking.status != BookingStatus.confirmed
        or booking.deleted_at is not None
        or row.cancelled_at is not None
        or row.starts_at <= now
    ):
        return None
    local = zone(billing_settings(session, booking.organization_id).timezone or "UTC")
    gym = session.get(Organization, booking.organization_id)
    return {
        "gym": gym.name,
        "class_name": kind.name,
        "when": f"{row.starts_at.astimezone(local):%Y-%m-%d %H:%M}",
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
