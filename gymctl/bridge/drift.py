"""Drift: the entity map side by side with what the external system holds now (issue 18).

For members, bridge memberships and the poll window's bookings: missing on either side,
different, and orphaned (a link whose platform entity is gone or ended while the external one
lives on: a member's external user deactivated there does not). Ids and field names only: no
names, emails or phone numbers in the report.

Cost at the external system: the users' pages, one schedule read, and one memberships read per
member whose link says it holds a live bridge membership (at the organization's rate).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge.client import ExternalGymClient, user_pages
from gymctl.bridge.polling import timezone_of, window
from gymctl.identity.users import address_keys
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus, User
from gymctl.models.billing import Subscription
from gymctl.models.bridge import EntityLink, EntityType


@dataclass
class External:
    """What the external system holds now."""

    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    memberships: dict[str, dict[str, Any]] = field(default_factory=dict)  # of the users read
    registrations: dict[str, tuple[str, str]] = field(default_factory=dict)  # id: (class, user)
    classes: set[str] = field(default_factory=set)


def _links(session: Session, organization_id: uuid.UUID, entity_type: EntityType) -> list:
    return list(
        session.scalars(
            select(EntityLink).where(
                EntityLink.organization_id == organization_id,
                EntityLink.entity_type == entity_type,
            )
        )
    )


def read_external(
    session: Session, organization_id: uuid.UUID, client: ExternalGymClient, now: datetime
) -> External:
    """Every read first, with no transaction open across a call."""
    live_users = {
        link.data.get("memberId")
        for link in _links(session, organization_id, EntityType.membership)
        if link.data.get("status") == "active"
    }
    members = {
        link.platform_id: link.external_id
        for link in _links(session, organization_id, EntityType.member)
    }
    zone = timezone_of(session, organization_id)
    session.commit()
    found = External()
    for rows in user_pages(client):
        for row in rows:
            found.users[str(row["id"])] = row
    for member_id in sorted(m for m in live_users if m in members):
        for held in client.user_memberships(members[member_id]):
            found.memberships[str(held["id"])] = held
    for item in client.schedule(*window(now, zone)):
        found.classes.add(str(item["id"]))
        for registration in item.get("registrations", []):
            found.registrations[str(registration["id"])] = (
                str(item["id"]), str(registration["user_id"])
            )  # fmt: skip
    return found


def _name(user: User) -> tuple[str, str]:
    name = (user.name or "").strip() or (user.email or "member").split("@")[0]
    first, _, last = name.partition(" ")
    return first, last.strip()


def compare(
    session: Session, organization_id: uuid.UUID, found: External, *, type_id: str | None
) -> dict[str, Any]:
    report: dict[str, Any] = {}
    members = _links(session, organization_id, EntityType.member)
    section: dict[str, list] = {"missingExternally": [], "different": [], "orphaned": [],
                                "notLinked": []}  # fmt: skip
    linked_users = set()
    rows = []
    for link in members:
        linked_users.add(link.external_id)
        member = session.get(Membership, uuid.UUID(link.platform_id)) if link.platform_id else None
        rows.append((link, member, session.get(User, member.user_id) if member else None))
    # Theirs is the address we sent (or the one an import matched ours to): the same address
    # by the project's one rule (identity.users.address_keys, the database's fold), as ours
    # are compared with each other; str.lower() folds otherwise (decisions s48).
    keys = address_keys(
        session,
        [(user.email or "") for _link, _member, user in rows if user is not None]
        + [(there.get("email") or "") for there in found.users.values()],
    )
    for link, member, user in rows:
        there = found.users.get(link.external_id)
        if there is None:
            section["missingExternally"].append({"memberId": link.platform_id,
                                                 "externalId": link.external_id})  # fmt: skip
        elif member is None or member.status is not MembershipStatus.active:
            # Ended here: its external user is deactivated there (mirror.member_retired, the
            # link kept and marked). Only one that is still active there lives on.
            if there.get("active", True) is not False:
                section["orphaned"].append({"memberId": link.platform_id,
                                            "externalId": link.external_id})  # fmt: skip
        else:
            first, last = _name(user)
            fields = [
                name
                for name, ours, theirs in (
                    ("email", keys[user.email or ""], keys[there.get("email") or ""]),
                    ("firstName", first, there.get("first_name") or ""),
                    ("lastName", last, there.get("last_name") or ""),
                    ("active", True, there.get("active", True) is not False),
                )
                if ours != theirs
            ]
            if fields:
                section["different"].append({"memberId": link.platform_id,
                                             "externalId": link.external_id,
                                             "fields": fields})  # fmt: skip
    section["notLinked"] = sorted(u for u in found.users if u not in linked_users)
    report["members"] = section

    section = {"missingExternally": [], "different": [], "orphaned": [], "notLinked": []}
    ours = set()
    for link in _links(session, organization_id, EntityType.membership):
        if link.data.get("status") != "active":
            continue
        ours.add(link.external_id)
        entry = {"subscriptionId": link.platform_id, "externalId": link.external_id}
        there = found.memberships.get(link.external_id)
        subscription = session.get(Subscription, uuid.UUID(link.platform_id))
        if there is None or not there.get("active"):
            section["missingExternally"].append(entry)
        elif subscription is None or subscription.status.value not in (
            "active", "past_due", "debt"
        ):  # fmt: skip
            section["orphaned"].append(entry)
        elif (there.get("start_date"), there.get("end_date")) != (
            link.data.get("startDate"), link.data.get("endDate")
        ):  # fmt: skip
            section["different"].append({**entry, "fields": ["dates"]})
    section["notLinked"] = sorted(
        external
        for external, held in found.memberships.items()
        if external not in ours and held.get("active")
        and str(held.get("membership_type_id")) == str(type_id)
    )  # fmt: skip
    report["memberships"] = section

    section = {"missingExternally": [], "missingOnPlatform": [], "different": [], "orphaned": []}
    users_to_members = {link.external_id: link.platform_id for link in members}
    bookings = [
        link
        for link in _links(session, organization_id, EntityType.booking)
        if link.data.get("scheduleId") in found.classes
    ]
    known = {link.external_id for link in bookings}
    for link in bookings:
        entry = {"bookingId": link.platform_id, "externalId": link.external_id}
        booking = session.get(Booking, uuid.UUID(link.platform_id)) if link.platform_id else None
        held_there = link.external_id in found.registrations
        booked_here = (
            booking is not None
            and booking.status is BookingStatus.confirmed
            and booking.deleted_at is None
        )
        if link.data.get("status") == "booked" and not held_there:
            section["missingExternally"].append(entry)
        elif held_there and found.registrations[link.external_id][0] != link.data["scheduleId"]:
            section["different"].append({**entry, "fields": ["class"]})
        elif held_there and booking is None:
            section["missingOnPlatform"].append(entry)
        elif held_there and not booked_here:
            section["orphaned"].append(entry)
    for registration, (external_class, user) in sorted(found.registrations.items()):
        if registration not in known and user in users_to_members:
            section["missingOnPlatform"].append({"externalId": registration,
                                                 "externalClassId": external_class,
                                                 "memberId": users_to_members[user]})  # fmt: skip
    report["bookings"] = section
    report["summary"] = {
        name: sum(len(rows) for key, rows in part.items() if key != "notLinked")
        for name, part in report.items()
    }
    return report


def drift(
    session: Session,
    organization_id: uuid.UUID,
    client: ExternalGymClient,
    *,
    now: Callable[[], datetime],
    type_id: str | None,
) -> dict[str, Any]:
    found = read_external(session, organization_id, client, now())
    return compare(session, organization_id, found, type_id=type_id)
