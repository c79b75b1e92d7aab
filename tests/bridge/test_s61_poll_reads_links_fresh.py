"""The poll reads the booking links as they stand, not as its run's session first loaded them
(s59 noticed: `polling._links` read no fresh copy).

A dispatcher run writes the links its ops changed in bulk (OpContext.write_links: Core
statements, past the session's loaded rows), then polls in the same session. A booking link
loaded as booked earlier in the run and cancelled by the run's own op was read back stale:
its registration gone from the external class, the reconcile marked it cancelled there, with
a bridge.booking_cancelled_externally event for the bookings area, the platform's own cancel
taken for the external system's."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from gymctl.bridge import entity_map, polling
from gymctl.models import OutboxEvent
from gymctl.models.bridge import EntityLink, EntityType, Origin
from tests.bridge.test_poll_window import connected_row
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_a_booking_link_the_runs_bulk_write_cancelled_is_read_as_cancelled(session, org, connected):
    session.add(EntityLink(organization_id=org.id, entity_type=EntityType.booking,
                           platform_id="b1", external_id="r1", origin=Origin.mirror,
                           data={"scheduleId": "c1", "status": "booked", "memberId": "m"},
                           created_at=NOW, updated_at=NOW))  # fmt: skip
    session.commit()
    loaded = entity_map.find(session, org.id, EntityType.booking, "b1")  # as an op of the run
    assert loaded.data["status"] == "booked"
    links = EntityLink.__table__
    cancelled = {"scheduleId": "c1", "status": "cancelled", "memberId": "m"}
    session.execute(  # the run's bulk write of the op's cancel
        update(links).where(links.c.id == loaded.id).values({links.c.metadata: cancelled})
    )
    session.commit()

    items = [{"id": "c1", "date": NOW.date().isoformat(), "registrations": []}]
    counts = polling.reconcile_bookings(session, connected_row(session, org), items, NOW)
    session.commit()

    assert counts["cancelledExternally"] == 0
    assert session.scalar(select(links.c.metadata).where(links.c.id == loaded.id)) == cancelled
    assert not session.scalars(
        select(OutboxEvent).where(OutboxEvent.name == "bridge.booking_cancelled_externally")
    ).all()
