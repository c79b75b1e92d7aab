"""One person's two rows folded into one (access.folding, spec A 5.3) leave no bridge link
naming a row the fold deleted (spec B 2.6: the entity map names the platform's rows)."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import select

from gymctl.access.invitations import _links
from gymctl.bridge.entity_map import PLATFORM_ROWS
from gymctl.models import Booking, BookingStatus, Invitation, Membership, Role
from gymctl.models.bridge import EntityLink, EntityType, Origin
from tests.access.test_email_ownership import desk
from tests.bookings.conftest import book_seat, class_session, class_type  # noqa: F401
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def mirrored(session, gym, entity_type: EntityType, platform_id, external_id: str, **data):
    """What the bridge's mirror recorded when it sent the row (the gym was connected then)."""
    row = EntityLink(
        organization_id=gym.id,
        entity_type=entity_type,
        platform_id=str(platform_id),
        external_id=external_id,
        origin=Origin.mirror,
        data=data,
        created_at=NOW,
        updated_at=NOW,
    )
    session.add(row)
    session.flush()
    return row


def test_accepting_a_link_request_leaves_no_bridge_link_naming_a_deleted_row(
    client,
    session,
    settings,
    gym,
    class_session,  # noqa: F811
):
    """The member, mirrored to the external system with tomorrow's seat, was removed (the seat
    given up) and registered again at the desk, where the new profile booked the same class.
    Accepting the link request deleted the login's ended membership, and with it the cancelled
    booking: the member link and the booking link named nothing (the external user stood for
    no member here, and a booking made there by the person was an owner issue)."""
    member = gym[Role.member]
    seat = book_seat(session, gym, class_session, member.membership)
    mirrored(session, gym, EntityType.member, member.membership.id, "ext-user-1")
    mirrored(session, gym, EntityType.booking, seat.id, "ext-booking-1",
             memberId=str(member.membership.id), status="booked")  # fmt: skip
    session.commit()
    removed = client.delete(
        f"/organizations/{gym.id}/members/{member.user.id}", headers=gym[Role.owner].headers
    )
    assert removed.status_code == 200
    registered = desk(client, gym, member.user.email)
    assert registered.status_code == 201
    profile = session.scalar(
        select(Membership).where(
            Membership.organization_id == gym.id,
            Membership.user_id == uuid.UUID(registered.json["userId"]),
        )
    )
    assert book_seat(session, gym, class_session, profile).status is BookingStatus.confirmed
    session.commit()
    invitation = session.scalar(select(Invitation).where(Invitation.profile_user_id.is_not(None)))
    token = parse_qs(urlparse(_links(settings, invitation, NOW)["accept"]).query)["token"][0]

    accepted = client.post("/invitations/accept", json={"token": token}, headers=member.headers)

    assert accepted.status_code == 200, accepted.json
    session.expire_all()
    links = session.scalars(select(EntityLink).where(EntityLink.organization_id == gym.id)).all()
    named = {
        row.entity_type: session.get(PLATFORM_ROWS[row.entity_type], uuid.UUID(row.platform_id))
        for row in links
    }
    assert all(named.values()), {t.value: r for t, r in named.items()}
    assert named[EntityType.member].id == member.membership.id  # the ended row, kept whole
    seats = session.scalars(
        select(Booking.status).where(
            Booking.class_session_id == class_session.id, Booking.user_id == member.user.id
        )
    ).all()
    assert sorted(seats) == sorted([BookingStatus.confirmed, BookingStatus.cancelled])
