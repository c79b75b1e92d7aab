"""An op an operator dismisses while the owner links its class stays dismissed (a helper's
audit of stale reads, s61).

Linking a class retries the ops parked for want of it (classes.link_class, spec B 2.6's
inbox). It read them unlocked, then `queue.get_op` locked each with `session.get`, which
hands back the copy the session already holds: an op whose dismiss committed meanwhile
still read parked and was put back to pending, and the dispatcher sent what the operator had
given up ("never sent"). PostgreSQL's: on the embedded default the first read already holds
the one write lock, so no dismiss lands between."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

from sqlalchemy import select

from gymctl.bookings import schedule
from gymctl.bridge import classes, enqueue, queue
from gymctl.db import get_engine, session_factory
from gymctl.models import IntegrationConnection
from gymctl.models.bridge import EntityLink, EntityType, OpStatus, Origin, SyncOp
from tests import factories
from tests.conftest import NOW, wait_for_a_lock_wait

STARTS = NOW + timedelta(days=1)


def _two_bookings_parked_for_their_class(session):
    """A connected gym, a platform class and an unclaimed external class, and two members'
    bookings parked as class_unmatched: (organization, class, external class, the op ids)."""
    org = factories.organization(session)
    session.add(IntegrationConnection(organization_id=org.id, status="active"))
    kind = schedule.create_class_type(
        session, org.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=STARTS, now=NOW)
    session.add(EntityLink(organization_id=org.id, entity_type=EntityType.schedule,
                           platform_id=None, external_id="ext-1", origin=Origin.poll,
                           data={"date": STARTS.date().isoformat(), "time": "09:00",
                                 "name": "WOD"}, created_at=NOW, updated_at=NOW))  # fmt: skip
    for _ in range(2):
        enqueue(session, organization_id=org.id, op_type="booking.create",
                payload={"memberId": str(uuid.uuid4()), "bookingId": str(uuid.uuid4()),
                         "sessionId": str(row.id)}, now=NOW)  # fmt: skip
    session.commit()
    ops = queue.claim(session, org.id, now=NOW, limit=10, lease=timedelta(minutes=5), owner="w")
    parked = [(op, queue.parked(op, issue=classes.UNMATCHED, error="no class")) for op in ops]
    queue.record(session, parked, owner="w", now=NOW)
    session.commit()
    return org.id, row.id, "ext-1", sorted(op.id for op in ops)


def test_an_op_dismissed_while_its_class_is_linked_stays_dismissed(committed_pg):
    engine = get_engine(committed_pg)
    factory = session_factory(engine)
    with factory() as session:
        org_id, class_id, external, (kept, dismissed) = _two_bookings_parked_for_their_class(
            session
        )
    operator = factory()
    queue.dismiss(operator, dismissed, now=NOW, organization_id=org_id)  # locked, not committed
    linked: list[bool] = []

    def owner_links() -> None:
        with factory() as owner:
            classes.link_class(owner, org_id, class_id, external, now=NOW)
            owner.commit()
        linked.append(True)

    owner = threading.Thread(target=owner_links)
    owner.start()
    wait_for_a_lock_wait(engine, rival=owner)
    operator.commit()
    operator.close()
    owner.join(10)

    assert linked == [True]  # the link itself goes through
    with factory() as session:
        statuses = dict(session.execute(select(SyncOp.id, SyncOp.status)).all())
    assert statuses == {kept: OpStatus.pending, dismissed: OpStatus.dismissed}
