"""A switch of account (connect with switchAccount, decisions s57) at its joins with the rest of
the bridge (s62, found by a review of s60 and s61).

The switch forgets the old account's links and the history of the ops sent there, so the gym
starts over as at a first connect. Three joins broke that promise: the mirror keys an entity's
next op by how many ops it has, and with the history gone a new change took the key of an op
kept from before (queue.enqueue answers an existing key with its op: the change was never
sent); a dispatcher run that straddled the switch wrote the old account's answers (its users'
and classes' ids) after the switch had forgotten them; and the old account's stored roster
stayed, so the next import matched members against both accounts' people."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bookings import book
from gymctl.bridge import entity_map
from gymctl.bridge.client import ExternalGymClient, Throttle
from gymctl.bridge.connection import connect, find_connection, import_roster
from gymctl.bridge.dispatcher import drain
from gymctl.clock import FixedClock
from gymctl.db import get_engine
from gymctl.models import AuditLog, BookingStatus
from gymctl.models.bridge import (
    EntityLink,
    EntityType,
    OpStatus,
    OpType,
    Origin,
    RosterEntry,
    SyncOp,
)
from tests import factories
from tests.bridge.conftest import API_KEY, FAST, committed_gym, run
from tests.bridge.test_inbound import scene  # noqa: F401 (a fixture)
from tests.conftest import NOW

OTHER_KEY = "ak_live_other_account_9876543210"
SLOW_CALLS = replace(FAST, timeout=5.0)  # the call held while the switch checks its key


def _seat_ops(session, booking) -> list:
    session.expire_all()
    return session.execute(
        select(SyncOp.id, SyncOp.op_type, SyncOp.status)
        .where(SyncOp.payload["bookingId"].as_string() == str(booking.id))
        .order_by(SyncOp.id)
    ).all()


@pytest.mark.embedded
def test_a_seat_booked_again_after_a_switch_is_sent(
    session,
    org,
    connected,
    fake,
    account,
    bridge_settings,
    clock,
    scene,  # noqa: F811
):
    """Booked (sent), cancelled (sent), booked again (queued); the switch forgets the two
    sent; cancelled and booked again after it: the last word on the seat is a new create."""
    member, seat = scene.member, scene.booking
    book.cancel(session, org.id, seat.id, actor_user_id=member.user_id, by_staff=True, now=NOW)
    session.commit()
    clock.set(NOW + timedelta(minutes=10))
    run(session, org.id, bridge_settings, clock)
    book.book(session, org.id, scene.session_row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()
    fake.add_account(OTHER_KEY, box_id="888")
    connect(session, org.id, OTHER_KEY, settings=bridge_settings, now=NOW, switch_account=True)
    session.commit()
    (kept,) = _seat_ops(session, seat)  # the create still to send

    book.cancel(session, org.id, seat.id, actor_user_id=member.user_id, by_staff=True, now=NOW)
    session.commit()
    book.book(session, org.id, scene.session_row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()

    session.refresh(seat)
    assert seat.status is BookingStatus.confirmed
    ops = _seat_ops(session, seat)
    assert [op.op_type for op in ops[1:]] == [OpType.booking_cancel, OpType.booking_create]
    assert ops[-1].id > kept.id
    assert ops[-1].status is OpStatus.pending


@pytest.mark.embedded
def test_a_switch_purges_the_old_accounts_roster(
    session, org, connected, fake, account, bridge_settings
):
    """Imported from account 777 (noa and leah there), switched to 888 (leah only, another
    id): the old roster is gone, and the import links leah to 888's user and noa to no one
    (linked to 777's user, her changes would have gone to a stranger's id, or no one's)."""
    noa = factories.membership(
        session, user=factories.user(session, email="noa@example.test"), organization=org
    )
    leah = factories.membership(
        session, user=factories.user(session, email="leah@example.test"), organization=org
    )
    fake.add_user(account, "noa@example.test")
    fake.add_user(account, "leah@example.test")
    with ExternalGymClient(fake.url, API_KEY, throttle=Throttle(None), account_id="777") as c:
        assert import_roster(session, connected, c, now=NOW)["linked"] == 2
    session.commit()
    other = fake.add_account(OTHER_KEY, box_id="888")
    leah_there = fake.add_user(other, "leah@example.test")

    switched = connect(
        session, org.id, OTHER_KEY, settings=bridge_settings, now=NOW, switch_account=True
    )
    session.commit()

    assert session.scalars(select(RosterEntry)).all() == []
    audit = session.scalar(select(AuditLog).where(AuditLog.action == "bridge.account_switched"))
    assert audit.data["rosterPurged"] == 2
    with ExternalGymClient(fake.url, OTHER_KEY, throttle=Throttle(None), account_id="888") as c:
        import_roster(session, switched, c, now=NOW)
    session.commit()
    assert entity_map.find(session, org.id, EntityType.member, noa.id) is None
    assert entity_map.find(session, org.id, EntityType.member, leah.id).external_id == leah_there


def _gym_at_777(engine, fake, bridge_settings, *, ops: int):
    """A gym connected to account 777 with `ops` creates queued and one member linked there
    (so a connect with 888's key is a switch, not a first connect); 888 is known too."""
    old = fake.add_account(API_KEY, box_id="777")
    fake.add_account(OTHER_KEY, box_id="888")
    org, _ = committed_gym(engine, bridge_settings, name="Swap", ops=ops)
    with Session(engine) as session:
        entity_map.link(session, org.id, EntityType.member, platform_id=uuid.uuid4(),
                        external_id="old-1", origin=Origin.import_, now=NOW)  # fmt: skip
        session.commit()
    return org, old


def _run_switched_during(fake, engine, org, bridge_settings, route: str):
    """A dispatcher run; when `route` is called at account 777, the owner switches the gym to
    888 from another connection, and the call is answered once the switch has checked its
    key and waits for it. The run's summary."""
    checked = threading.Event()
    started: list[threading.Thread] = []

    def switch() -> None:
        with Session(engine) as other:
            connect(other, org.id, OTHER_KEY, settings=bridge_settings, now=NOW,
                    switch_account=True)  # fmt: skip
            other.commit()

    def hook(call) -> None:
        if call.account == "888" and call.path == "/v3/membershipTypes":
            checked.set()
        elif call.account == "777" and f"{call.method} {call.path}" == route and not started:
            started.append(threading.Thread(target=switch))
            started[0].start()
            assert checked.wait(10)
            time.sleep(0.5)  # the switch writes, then waits for this call to be answered

    fake.on_call = hook
    with Session(engine, expire_on_commit=False) as session:
        summary = drain(session, org.id, settings=bridge_settings, policy=SLOW_CALLS,
                        runner="t", clock=FixedClock(NOW))  # fmt: skip
    started[0].join(30)
    return summary


def _links(engine, org) -> list[tuple]:
    with Session(engine) as session:
        return session.execute(
            select(EntityLink.entity_type, EntityLink.external_id).where(
                EntityLink.organization_id == org.id
            )
        ).all()


def test_a_batch_answered_by_the_old_account_writes_no_link_after_the_switch(
    committed_database, fake, bridge_settings
):
    """The first create is answered by 777 while the switch waits for it: the run stops at
    its next call, and the user 777 made is not linked (its id names no one at 888); its op
    goes back to pending with the two not sent, to be sent to 888 (searched for first)."""
    engine = get_engine(committed_database)
    org, old = _gym_at_777(engine, fake, bridge_settings, ops=3)

    summary = _run_switched_during(fake, engine, org, bridge_settings, "POST /v3/users")

    assert len(old.users) == 1  # the create reached 777 before the switch committed
    assert _links(engine, org) == []
    assert summary.stopped == "disconnected"
    with Session(engine) as session:
        assert find_connection(session, org.id).external_account_id == "888"
        statuses = session.scalars(select(SyncOp.status).order_by(SyncOp.id)).all()
    assert statuses == [OpStatus.pending] * 3


def test_a_schedule_read_from_the_old_account_is_not_written_after_the_switch(
    committed_database, fake, bridge_settings
):
    """The poll's schedule read is answered by 777 while the switch waits for it: none of
    777's classes is stored, and the new account's poll stays due (not marked done)."""
    engine = get_engine(committed_database)
    org, old = _gym_at_777(engine, fake, bridge_settings, ops=0)
    fake.add_class(old, NOW.date().isoformat(), time="23:00")

    summary = _run_switched_during(fake, engine, org, bridge_settings, "GET /v3/schedule")

    assert summary.stopped == "disconnected"
    assert _links(engine, org) == []
    with Session(engine) as session:
        connection = find_connection(session, org.id)
        assert connection.external_account_id == "888"
        assert connection.schedule_poll_due_at is not None
