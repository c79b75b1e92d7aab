"""Polling: the external system has no webhooks and no delta queries (spec B 8).

The schedule poll (every 5 minutes, today through 14 days) keeps the external classes in the
entity map (unclaimed ones have no platform id yet). The booking reconcile (every minute, and
right after each booking change) compares the registrations there with the bookings we
mirrored: one cancelled there, or one made there by a linked member, becomes a domain event for
the bookings area. The daemon table only marks them due; the organization's dispatcher makes
the calls, so they share its lock and its rate.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import String, literal, select, update
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.functions import FunctionElement

from gymctl.bridge import entity_map
from gymctl.bridge.client import ExternalGymClient
from gymctl.bridge.payloads import member_key
from gymctl.events import EventKind, emit
from gymctl.models import Organization
from gymctl.models.billing import BillingSettings
from gymctl.models.bridge import (
    ConnectionStatus,
    EntityLink,
    EntityType,
    IntegrationConnection,
    OpStatus,
    Origin,
    SyncOp,
)

WINDOWDAYS = 14


def mark_due(session: Session, column: str, *, now: datetime) -> int:
    """Ask every active connection's dispatcher for a poll (`schedule_poll_due_at`) or a
    reconcile (`reconcile_due_at`); an earlier request still waiting is kept. A deleted gym's
    bridge polls nothing (connection.wind_down)."""
    field = getattr(IntegrationConnection, column)
    deleted = select(Organization.id).where(Organization.deleted_at.is_not(None))
    result = session.execute(
        update(IntegrationConnection)
        .where(
            IntegrationConnection.status == ConnectionStatus.active,
            field.is_(None),
            IntegrationConnection.organization_id.not_in(deleted),  # winding down: no polls
        )
        .values({column: now})
        .execution_options(synchronize_session=False)
    )
    return result.rowcount


def timezone_of(session: Session, organization_id: uuid.UUID) -> ZoneInfo:
    """The gym's timezone (spec B 2.5): its days are the ones the external system lists."""
    settings = session.get(BillingSettings, organization_id)
    return ZoneInfo(settings.timezone if settings is not None else "UTC")


def window(now: datetime, zone: ZoneInfo) -> tuple[date, date]:
    """Today (in the gym's timezone, not UTC) through 14 days."""
    today = now.astimezone(zone).date()
    return today, today + timedelta(days=WINDOWDAYS)


class json_text(FunctionElement[str]):
    """A JSON member of the entity map's metadata as text, spelled as the migration's
    expression indexes are (a bound key would not match them). Keys are constants of this
    module, spelled into the SQL."""

    type = String()
    inherit_cache = True


@compiles(json_text, "postgresql")
def _json_text_pg(element, compiler, **kw) -> str:
    column, key = element.clauses
    return f"({compiler.process(column, **kw)} ->> '{key.value}')"


@compiles(json_text, "sqlite")
def _json_text_sqlite(element, compiler, **kw) -> str:
    column, key = element.clauses
    return f"json_extract({compiler.process(column, **kw)}, '$.{key.value}')"


Noticed = list[tuple[str, EntityLink]]  # what changed there, for the platform to apply


def poll_schedule(
    session: Session,
    connection: IntegrationConnection,
    items: list[dict[str, Any]],
    now: datetime,
    noticed: Noticed | None = None,
) -> dict[str, int]:
    """Upsert the window's classes; one gone from the window is marked removed. A linked
    class removed there, or given another coach there, is noticed."""
    noticed = noticed if noticed is not None else []
    organization_id = connection.organization_id
    counts = {"seen": len(items), "new": 0, "changed": 0, "removed": 0}
    seen: set[str] = set()
    for item in items:
        external_id = str(item["id"])
        seen.add(external_id)
        data = {
            "date": item.get("date"),
            "time": item.get("time"),
            "endTime": item.get("end_time"),
            "name": item.get("name"),
            "coachId": str(item["coach_id"]) if item.get("coach_id") is not None else None,
            "locationId": str(item["location_id"]) if item.get("location_id") is not None else None,
            "maxUsers": item.get("max_users"),
            "removed": False,
        }
        row = entity_map.find_external(session, organization_id, EntityType.schedule, external_id)
        if row is None:
            session.add(
                EntityLink(
                    organization_id=organization_id,
                    entity_type=EntityType.schedule,
                    platform_id=None,
                    external_id=external_id,
                    origin=Origin.poll,
                    data=data,
                    created_at=now,
                    updated_at=now,
                )
            )
            counts["new"] += 1
        elif {key: row.data.get(key) for key in data} != data:
            coach_changed = row.data.get("coachId") != data["coachId"] and "coachId" in row.data
            row.data = {**row.data, **data}
            row.updated_at = now
            counts["changed"] += 1
            if coach_changed and row.platform_id is not None:
                noticed.append(("coach_changed", row))
    first, last = window(now, timezone_of(session, organization_id))
    for row in _schedule_rows(session, organization_id, first, last):
        if row.external_id not in seen and not row.data.get("removed"):
            row.data = {**row.data, "removed": True}
            row.updated_at = now
            counts["removed"] += 1
            if row.platform_id is not None:
                noticed.append(("class_removed", row))
    connection.last_schedule_poll_at = now
    connection.schedule_poll_due_at = None
    return counts


DAY = json_text(EntityLink.data, literal("date"))
_SCHEDULE_REF = json_text(EntityLink.data, literal("scheduleId"))


def _schedule_rows(session: Session, organization_id, first: date, last: date) -> list[EntityLink]:
    """The window's classes only (an expression index on the day): history costs nothing."""
    return list(
        session.scalars(
            select(EntityLink).where(
                EntityLink.organization_id == organization_id,
                EntityLink.entity_type == EntityType.schedule,
                DAY.between(first.isoformat(), last.isoformat()),
            )
        )
    )


def reconcile_bookings(
    session: Session,
    connection: IntegrationConnection,
    items: list[dict[str, Any]],
    now: datetime,
    noticed: Noticed | None = None,
) -> dict[str, int]:
    """A mirrored booking gone there, or a booking made there by a linked member: noticed."""
    noticed = noticed if noticed is not None else []
    organization_id = connection.organization_id
    registrations: dict[str, tuple[str, str]] = {}
    for item in items:
        for registration in item.get("registrations", []):
            registrations[str(registration["id"])] = (str(item["id"]), str(registration["user_id"]))
    in_window = {str(item["id"]) for item in items}
    counts = {"confirmed": 0, "cancelledExternally": 0, "seenExternally": 0}
    # Only the window's booking links, and the links of the registrations seen: the cost
    # follows the poll window, never the organization's history (expression index).
    bookings = _links(session, organization_id, EntityType.booking, _SCHEDULE_REF, in_window)
    known = {row.external_id for row in bookings}
    known |= {
        row.external_id
        for row in _links(
            session, organization_id, EntityType.booking, EntityLink.external_id,
            set(registrations) - known,
        )
    }  # fmt: skip
    for row in bookings:
        if row.data.get("status") != "booked":
            continue
        if row.external_id in registrations:
            counts["confirmed"] += 1
            continue
        row.data = {**row.data, "status": "cancelled_externally"}
        row.updated_at = now
        counts["cancelledExternally"] += 1
        _event(session, "bridge.booking_cancelled_externally", row, now)
        noticed.append(("booking_cancelled", row))
    members = _members_by_external(
        session, organization_id, {user for _, user in registrations.values()}
    )
    busy = _sending(
        session, {members[user] for _, user in registrations.values() if user in members}
    )
    for registration_id, (schedule_id, user_id) in registrations.items():
        if registration_id in known or user_id not in members:
            continue
        if members[user_id] in busy:
            # Perhaps our own booking whose answer was lost: its op searches and links it.
            # Judged at a later reconcile, once the member's ops have settled.
            continue
        row = EntityLink(
            organization_id=organization_id,
            entity_type=EntityType.booking,
            platform_id=None,
            external_id=registration_id,
            origin=Origin.poll,
            data={"memberId": members[user_id], "scheduleId": schedule_id, "status": "booked"},
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        session.flush()
        counts["seenExternally"] += 1
        _event(session, "bridge.booking_seen", row, now)
        noticed.append(("booking_seen", row))
    connection.last_reconcile_at = now
    connection.reconcile_due_at = None
    return counts


IN_CHUNK = 500  # values per IN list


def _sending(session: Session, member_ids: set[str]) -> set[str]:
    """The members with ops still on their way (waiting or in flight; a parked one is not)."""
    keys = sorted(member_key(member) for member in member_ids)
    busy: set[str] = set()
    for start in range(0, len(keys), IN_CHUNK):
        busy |= {
            key.removeprefix("member:")
            for key in session.scalars(
                select(SyncOp.aggregate_key).where(
                    SyncOp.aggregate_key.in_(keys[start : start + IN_CHUNK]),
                    SyncOp.status.in_((OpStatus.pending, OpStatus.in_flight, OpStatus.failed)),
                )
            )
        }
    return busy


def _links(session: Session, organization_id, entity_type, column, values) -> list[EntityLink]:
    """The organization's links of a type whose `column` is one of `values`, as they stand:
    a dispatcher run polls in the session its ops ran in, whose links were written in bulk
    (OpContext.write_links), past the rows the session had loaded (populate_existing; a
    booking the run cancelled, read back as booked, was taken as cancelled externally)."""
    values = sorted(values)
    rows: list[EntityLink] = []
    for start in range(0, len(values), IN_CHUNK):
        rows += session.scalars(
            select(EntityLink)
            .where(
                EntityLink.organization_id == organization_id,
                EntityLink.entity_type == entity_type,
                column.in_(values[start : start + IN_CHUNK]),
            )
            .execution_options(populate_existing=True)
        )
    return rows


def _members_by_external(session: Session, organization_id, users: set[str]) -> dict[str, str]:
    """The linked members among the external users seen in the window."""
    rows = _links(session, organization_id, EntityType.member, EntityLink.external_id, users)
    return {row.external_id: row.platform_id for row in rows if row.platform_id is not None}


def _event(session: Session, name: str, row: EntityLink, now: datetime) -> None:
    """For the bookings area; ids only, no personal data."""
    emit(
        session,
        EventKind.domain,
        name,
        at=now,
        aggregate_type="bridge_booking",
        aggregate_id=row.external_id,
        organization_id=row.organization_id,
        payload={
            "bookingId": row.platform_id,
            "memberId": row.data.get("memberId"),
            "externalScheduleId": row.data.get("scheduleId"),
            "externalBookingId": row.external_id,
        },
    )


def serve_polls(
    session: Session,
    connection: IntegrationConnection,
    client: ExternalGymClient,
    now: Callable[[], datetime],
    apply: Callable[[Noticed], dict[str, int]] | None = None,
    as_read: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """The due poll and reconcile of one organization, on one schedule read. What they notice
    is applied by `apply` in the same transaction: committed together, never dropped.
    `as_read`, after the read: whether the gym is still on the account that answered it (a
    switch committed during the call forgot that account's links); if not, nothing is
    written and both stay due."""
    at = now()
    poll_due = connection.schedule_poll_due_at is not None and connection.schedule_poll_due_at <= at
    reconcile_due = connection.reconcile_due_at is not None and connection.reconcile_due_at <= at
    if not (poll_due or reconcile_due):
        return {}
    zone = timezone_of(session, connection.organization_id)
    session.commit()  # no transaction open across the call
    items = client.schedule(*window(at, zone))
    if as_read is not None and not as_read():
        return {}
    result: dict[str, Any] = {}
    noticed: Noticed = []
    if poll_due:
        result["schedule"] = poll_schedule(session, connection, items, now(), noticed)
    if reconcile_due:
        result["bookings"] = reconcile_bookings(session, connection, items, now(), noticed)
    if apply is not None and noticed:
        result["applied"] = apply(noticed)
    session.commit()
    return result
