"""The poll window is the gym's days, and what the poll and the reconcile read follows that
window, not the organization's history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import event

from gymctl.bridge import polling
from gymctl.models.billing import BillingSettings
from gymctl.models.bridge import EntityLink, EntityType, Origin
from tests.bridge.conftest import run
from tests.conftest import NOW


def test_today_of_the_poll_window_is_the_gyms_day_not_utcs(
    session, org, connected, fake, bridge_settings, clock
):
    """At 22:30 UTC on 21 November it is already 22 November in Jerusalem (UTC+2)."""
    session.add(BillingSettings(organization_id=org.id, timezone="Asia/Jerusalem"))
    clock.set(NOW.replace(hour=22, minute=30))
    connected.schedule_poll_due_at = clock.now()
    session.commit()
    fake.calls.clear()
    run(session, org.id, bridge_settings, clock)
    (call,) = fake.calls_to("GET /v3/schedule")
    assert (call.query["from_date"], call.query["to_date"]) == ("2026-11-22", "2026-12-06")


def _history(session, org, count: int) -> None:
    """Booked links and classes of days long past (the poll window never holds them)."""
    old = (NOW - timedelta(days=200)).date().isoformat()
    for n in range(count):
        for entity_type, data in (
            (EntityType.booking, {"scheduleId": f"old-{n}", "status": "booked", "memberId": "m"}),
            (EntityType.schedule, {"date": old, "removed": False}),
        ):
            session.add(EntityLink(organization_id=org.id, entity_type=entity_type,
                                   platform_id=None, external_id=f"h{n}", origin=Origin.poll,
                                   data=data, created_at=NOW, updated_at=NOW))  # fmt: skip
    session.commit()


@pytest.mark.embedded
def test_the_reconcile_and_the_poll_read_only_the_windows_links(session, org, connected):
    """Spec B 8: reconcile every minute; with 100 000 booking links of history it must not
    read them each time."""
    _history(session, org, 30)
    today = NOW.date().isoformat()
    session.add(EntityLink(organization_id=org.id, entity_type=EntityType.booking,
                           platform_id="b1", external_id="r-gone", origin=Origin.mirror,
                           data={"scheduleId": "c1", "status": "booked", "memberId": "m"},
                           created_at=NOW, updated_at=NOW))  # fmt: skip
    session.commit()
    session.expunge_all()
    loaded: set[str] = set()

    def seen(_session, instance) -> None:
        if isinstance(instance, EntityLink):
            loaded.add(instance.external_id)

    event.listen(session, "loaded_as_persistent", seen)
    items = [{"id": "c1", "date": today, "registrations": []}]
    counts = polling.reconcile_bookings(session, connected_row(session, org), items, NOW)
    polling.poll_schedule(session, connected_row(session, org), items, NOW)
    assert counts["cancelledExternally"] == 1
    assert loaded == {"r-gone", "c1"}  # nothing of the history


def connected_row(session, org):
    from gymctl.bridge.connection import find_connection

    return find_connection(session, org.id)
