"""Push fanout (spec A 6.4): what a member must know now reaches the devices their gym's app
registered, in the language the app registered with. Today one event: a waitlisted booking
promoted to a seat (`booking.promoted`), which the member may never see before the class
otherwise. Delivery revalidates each registration at send time (`push.deliver`).

Each event is pushed once, keyed by its outbox id (`push_notices`), each in a transaction of
its own: its record is written first, the devices pushed, the record committed. A provider
error rolls the record back (retried next run); only a stop between a push and its commit
pushes that event twice. A booking that is no longer a confirmed seat of a class still ahead
(the member cancelled meanwhile, the class was cancelled or has begun) is recorded and not
pushed. Events older than LOOKBACK are left alone, so a first run after an upgrade does not
push the history.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.billing.accounts import billing_settings
from gymctl.clock import zone
from gymctl.db import each_committed
from gymctl.events import unsettled
from gymctl.models import Booking, BookingStatus, ClassSession, ClassType, Organization, OutboxEvent
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.models.releases import PushNotice, PushRegistration
from gymctl.providers.push import PushProvider
from gymctl.releases import push
from gymctl.retention.emails import render

BATCH = 200
LOOKBACK = timedelta(days=2)
KINDS = {"booking.promoted": "booking_promoted"}  # outbox event -> template push_<kind>


def push_notices(
    factory: sessionmaker[Session], provider: PushProvider, *, now: datetime, limit: int = BATCH
) -> dict[str, int]:
    """Push every event of KINDS not yet pushed, each in a transaction of its own (module doc):
    how many reached a device, reached none (no registration may receive, or the seat is gone),
    failed (retried next run), or were recorded by another run first."""
    pending = unsettled(
        factory,
        OutboxEvent.name.in_(KINDS),
        PushNotice.outbox_event_id,
        since=now - LOOKBACK,
        limit=limit,
    )
    return each_committed(
        factory,
        pending,
        lambda session, event_id: _push(
            session, provider, session.get(OutboxEvent, event_id), now=now
        ),
        {"pushed": 0, "unreached": 0, "failed": 0, "skipped": 0},
        what="push of event",
    )


def _push(session: Session, provider: PushProvider, event: OutboxEvent, *, now: datetime) -> str:
    user_id = uuid.UUID(event.payload["userId"])
    record = PushNotice(
        id=ids.new_id(),
        outbox_event_id=event.id,
        organization_id=event.organization_id,
        user_id=user_id,
        kind=KINDS[event.name],
        sent=0,
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
        return "unreached"
    title, body = render(f"push_{record.kind}", _locale(session, event, user_id), **context)
    delivered = push.deliver(
        session,
        provider,
        event.organization_id,
        [user_id],
        title=title,
        body=body.strip(),
        data={"event": event.name, "bookingId": event.aggregate_id},
        now=now,
    )
    record.sent = delivered["sent"]
    return "pushed" if record.sent else "unreached"


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
