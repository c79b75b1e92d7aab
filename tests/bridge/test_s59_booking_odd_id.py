"""A booking answered `{"id": null}` (or an empty, odd id) is the external system's failure, as
any write's odd answer is (client.external_id_of, tests/bridge/test_odd_ids.py): nothing is
stored for it (never the external id "None"), and the retry finds the registration the call
made and links it, never books the member twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bridge import entity_map
from gymctl.models.bridge import EntityType, OpStatus, SyncOp
from tests.bridge.conftest import run
from tests.bridge.test_classes import _booked_member, _registered_at
from tests.conftest import NOW


@pytest.mark.parametrize("odd", [None, "", {}], ids=repr)
def test_a_booking_answered_with_an_odd_id_is_retried_and_links_its_registration(
    session, org, connected, fake, account, bridge_settings, clock, odd
):
    chosen = fake.add_class(account, "2026-11-22", time="07:00", name="WOD")
    _row, booking = _booked_member(session, org)
    run(session, org.id, bridge_settings, clock)  # the member, the plan, the poll
    fake.odd_ids["POST /v3/schedule/bookSession"] = odd
    clock.set(NOW + timedelta(minutes=2))
    run(session, org.id, bridge_settings, clock)
    op = session.scalars(select(SyncOp).where(SyncOp.op_type == "booking.create")).one()
    assert (op.status, op.attempts) == (OpStatus.failed, 1)
    assert entity_map.find(session, org.id, EntityType.booking, booking.id) is None
    fake.odd_ids.clear()
    clock.set(NOW + timedelta(minutes=15))
    run(session, org.id, bridge_settings, clock)
    assert op.status is OpStatus.succeeded
    (registration,) = [
        r for r, reg in account.registrations.items() if reg["schedule_id"] == chosen
    ]
    link = entity_map.find(session, org.id, EntityType.booking, booking.id)
    assert link.external_id == registration
    assert len(fake.calls_to("POST /v3/schedule/bookSession")) == 1
    assert len(_registered_at(account, chosen)) == 1
    assert fake.duplicates == []
