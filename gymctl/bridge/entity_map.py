"""The entity map (spec B 2.6): which external entity each platform entity is.

Unique both ways per organization and type, so one external user can never stand for two
members (nor one member for two external users).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge import codes
from gymctl.db import organization_row
from gymctl.errors import conflict, not_found, unprocessable
from gymctl.models import Booking, ClassSession, Lead, Membership, Plan, Subscription
from gymctl.models.bridge import EntityLink, EntityType, Origin
from gymctl.text import one_line

# The platform row each entity type's platform id names (the mirror's payloads): a member and
# a staff member are memberships, a membership is a subscription, a location the gym itself.
PLATFORM_ROWS = {
    EntityType.member: Membership,
    EntityType.staff: Membership,
    EntityType.membership: Subscription,
    EntityType.membership_type: Plan,
    EntityType.schedule: ClassSession,
    EntityType.booking: Booking,
    EntityType.lead: Lead,
}


def find(
    session: Session, organization_id: uuid.UUID, entity_type: EntityType, platform_id: Any
) -> EntityLink | None:
    return _find_by(session, organization_id, entity_type, EntityLink.platform_id, platform_id)


def find_external(
    session: Session, organization_id: uuid.UUID, entity_type: EntityType, external_id: str
) -> EntityLink | None:
    return _find_by(session, organization_id, entity_type, EntityLink.external_id, external_id)


def _find_by(
    session: Session, organization_id: uuid.UUID, entity_type: EntityType, column, value: Any
) -> EntityLink | None:
    return session.scalar(
        select(EntityLink)
        .where(
            EntityLink.organization_id == organization_id,
            EntityLink.entity_type == entity_type,
            column == str(value),
        )
        # The dispatcher writes links with Core: an object kept in the session must not hide
        # what it wrote.
        .execution_options(populate_existing=True)
    )


def link(
    session: Session,
    organization_id: uuid.UUID,
    entity_type: EntityType,
    *,
    platform_id: Any | None,
    external_id: str,
    origin: Origin,
    now: datetime,
    data: dict[str, Any] | None = None,
) -> EntityLink:
    """Record (or move) a link. The external entity already standing for another platform
    entity is refused with bridge_link_conflict; one the poll found unclaimed is taken over."""
    platform = str(platform_id) if platform_id is not None else None
    external_id = str(external_id)
    by_external = find_external(session, organization_id, entity_type, external_id)
    if by_external is not None and by_external.platform_id not in (None, platform):
        raise conflict(
            codes.BRIDGE_LINK_CONFLICT,
            f"external {entity_type.value} {external_id} is linked to another platform entity",
        )
    row = find(session, organization_id, entity_type, platform) if platform else None
    if row is not None and by_external is not None and row is not by_external:
        session.delete(by_external)  # the poll's unclaimed row gives way to the claimed one
        session.flush()
        data = {**by_external.data, **(data or {})}
    row = row or by_external
    if row is None:
        row = EntityLink(
            organization_id=organization_id,
            entity_type=entity_type,
            platform_id=platform,
            external_id=external_id,
            origin=origin,
            data=data or {},
            created_at=now,
        )
        session.add(row)
    else:
        row.platform_id = platform
        row.external_id = external_id
        row.origin = origin
        row.data = {**row.data, **(data or {})}
    row.updated_at = now
    session.flush()
    return row


def describe(row: EntityLink) -> dict[str, Any]:
    return {
        "entityType": row.entity_type.value,
        "platformId": row.platform_id,
        "externalId": row.external_id,
        "origin": row.origin.value,
        "updatedAt": row.updated_at.isoformat(),
    }


def check_platform_id(
    session: Session, organization_id: uuid.UUID, entity_type: EntityType, platform_id: str
) -> None:
    """An id given by hand names one of the gym's rows of that type (bridge_entity_not_found):
    a link to no row claims its external entity, and the mirror's own link of the real row
    would then be refused as bridge_link_conflict."""
    try:
        key = uuid.UUID(platform_id)
    except ValueError:
        key = None
    if entity_type == EntityType.location:
        found = key == organization_id
    else:
        model = PLATFORM_ROWS[entity_type]
        found = key is not None and organization_row(session, model, organization_id, key)
    if not found:
        raise not_found(
            codes.BRIDGE_ENTITY_NOT_FOUND,
            f"the gym has no {entity_type.value} {platform_id!r}",
            entityType=entity_type.value,
        )


def check_external_id(external_id: str) -> str:
    """An external id given by hand, trimmed: 1 to 128 characters on one line (the column's
    width), else bridge_external_id_invalid. An empty one linked the member to no external
    entity, and a longer one crashed the write on PostgreSQL."""
    trimmed = external_id.strip()
    width = EntityLink.__table__.c.external_id.type.length
    if not trimmed or len(trimmed) > width or not one_line(trimmed):
        raise unprocessable(
            codes.BRIDGE_EXTERNAL_ID_INVALID,
            f"an external id is 1 to {width} characters on one line",
        )
    return trimmed
