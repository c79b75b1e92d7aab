"""Class mapping: a platform session books into the external class of the same local day and
time, class and location; one no one can match is the owner's question at once, not hours of
retries, and the owner's pick sends the parked bookings."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from gymctl.bookings import book, schedule
from gymctl.bridge import classes, entity_map, mirror
from gymctl.bridge.connection import connect
from gymctl.models import Role
from gymctl.models.billing import BillingSettings, PlanType
from gymctl.models.bridge import EntityType, OpStatus, Origin, SyncOp
from tests import factories
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.conftest import API_KEY, run
from tests.conftest import NOW
from tests.factories import Gym

# 07:00 in Jerusalem (UTC+2 in November) on 22 November is 05:00 UTC.
STARTS = datetime.fromisoformat("2026-11-22T05:00:00+00:00")


def _booked_member(session, org, class_name="WOD", starts=STARTS):
    """A member with a live plan booked into a platform session; the ops queued by the mirror."""
    session.merge(BillingSettings(organization_id=org.id, timezone="Asia/Jerusalem"))
    user = factories.user(session, name="Dana Levi", email=f"dana{starts.day}@example.test")
    member = factories.membership(session, user=user, organization=org, role=Role.member)
    plan = make_plan(session, org, PlanType.cash)
    subscription = make_subscription(session, Gym.of(member), plan=plan)
    mirror.subscription_changed(session, subscription, now=NOW)
    kind = schedule.create_class_type(session, org.id, name=class_name, default_capacity=5,
                                      duration_minutes=60, now=NOW)  # fmt: skip
    row = schedule.schedule_session(session, kind, starts_at=starts, now=NOW)
    booking = book.book(session, org.id, row.id, member, actor_user_id=user.id, now=NOW)
    session.commit()
    return row, booking


def _booking_op(session):
    return session.scalars(select(SyncOp).where(SyncOp.op_type == "booking.create")).one()


@pytest.mark.embedded
def test_a_session_books_into_the_class_of_its_local_day_time_and_name(
    session, org, connected, fake, account, bridge_settings, clock
):
    right = fake.add_class(account, "2026-11-22", time="07:00", name="wod")
    fake.add_class(account, "2026-11-22", time="05:00", name="WOD")  # the UTC hour: not it
    fake.add_class(account, "2026-11-22", time="07:00", name="Yoga")
    row, _booking = _booked_member(session, org)
    run(session, org.id, bridge_settings, clock)  # sends the member, polls, matches
    clock.set(NOW + timedelta(minutes=2))  # the booking waited a minute for the poll
    run(session, org.id, bridge_settings, clock)
    op = _booking_op(session)
    assert op.status is OpStatus.succeeded
    (booked,) = fake.calls_to("POST /v3/schedule/bookSession")
    assert booked.body["schedule_id"] == right
    link = entity_map.find(session, org.id, EntityType.schedule, row.id)
    assert (link.external_id, link.origin) == (right, Origin.poll)


@pytest.mark.embedded
def test_an_unmatched_class_parks_its_booking_in_the_inbox_at_the_first_attempt(
    session, org, connected, fake, account, bridge_settings, clock
):
    """Never 8 hours of retries and then a silent park: the owner is asked at once."""
    one = fake.add_class(account, "2026-11-22", time="07:00", name="WOD")
    two = fake.add_class(account, "2026-11-22", time="07:00", name="WOD", location_id=2)
    _booked_member(session, org)
    run(session, org.id, bridge_settings, clock)
    clock.set(NOW + timedelta(minutes=2))
    run(session, org.id, bridge_settings, clock)
    op = _booking_op(session)
    assert (op.status, op.issue_code, op.attempts) == (OpStatus.parked, "class_unmatched", 1)
    assert {one, two} <= set(op.last_error.split(": ")[-1].split(", "))  # for the owner
    assert fake.calls_to("POST /v3/schedule/bookSession") == []


@pytest.mark.embedded
def test_a_class_beyond_the_poll_window_waits_uncharged_until_its_day_enters_it(
    session, org, connected, fake, account, bridge_settings, clock
):
    far = STARTS + timedelta(days=20)
    _booked_member(session, org, starts=far)
    run(session, org.id, bridge_settings, clock)
    op = _booking_op(session)
    assert (op.status, op.attempts) == (OpStatus.pending, 0)
    assert op.run_after.date() == (far - timedelta(days=14)).date() - timedelta(days=1)


def test_the_owner_picks_the_external_class_over_http_and_the_booking_is_sent(
    client, session, gym, fake, bridge_settings, clock
):
    account = fake.add_account(API_KEY)
    org = gym.organization
    connect(session, org.id, API_KEY, settings=bridge_settings, now=NOW)
    session.commit()
    chosen = fake.add_class(account, "2026-11-22", time="07:00", name="Strength")
    row, _booking = _booked_member(session, org)  # the platform calls it WOD: no match
    run(session, org.id, bridge_settings, clock)
    clock.set(NOW + timedelta(minutes=2))
    run(session, org.id, bridge_settings, clock)
    assert _booking_op(session).issue_code == "class_unmatched"
    clock.set(NOW)  # the tokens' time
    owner, member = gym.people[Role.owner], gym.people[Role.member]
    path = f"/organizations/{org.id}/bridge/classes/{row.id}/link"
    refused = client.post(path, json={"externalClassId": chosen}, headers=member.headers)
    assert (refused.status_code, refused.json["code"]) == (403, "owner_required")
    unknown = client.post(path, json={"externalClassId": "nope"}, headers=owner.headers)
    assert (unknown.status_code, unknown.json["code"]) == (404, "bridge_class_not_found")
    assert _booking_op(session).status is OpStatus.parked  # refusals changed nothing
    linked = client.post(path, json={"externalClassId": chosen}, headers=owner.headers)
    assert linked.status_code == 200, linked.json
    assert linked.json["retried"] == [_booking_op(session).id]
    run(session, org.id, bridge_settings, clock)
    assert _booking_op(session).status is OpStatus.succeeded
    (booked,) = fake.calls_to("POST /v3/schedule/bookSession")
    assert booked.body["schedule_id"] == chosen


def _seat_sent_to_the_first_of_two(session, org, fake, account, bridge_settings, clock):
    """Two external classes at the session's time; the poll matches the first (its name) and
    the member's seat is registered there. (first, the other, the platform session)"""
    first = fake.add_class(account, "2026-11-22", time="07:00", name="WOD")
    chosen = fake.add_class(account, "2026-11-22", time="07:00", name="Strength")
    row, _booking = _booked_member(session, org)
    run(session, org.id, bridge_settings, clock)
    clock.set(NOW + timedelta(minutes=2))
    run(session, org.id, bridge_settings, clock)
    return first, chosen, row


def _registered_at(account, class_id):
    return [r["user_id"] for r in account.registrations.values() if r["schedule_id"] == class_id]


@pytest.mark.embedded
def test_relinking_a_session_moves_its_registered_seats_to_the_new_class(
    session, org, connected, fake, account, bridge_settings, clock
):
    """The owner's pick replaces the poll's: the member's seat sent to the old external class
    is cancelled there and booked at the new one, not left registered in a class the session
    no longer books into (the external desk would count them twice, and never in the right
    class)."""
    first, chosen, row = _seat_sent_to_the_first_of_two(
        session, org, fake, account, bridge_settings, clock
    )
    (user_id,) = _registered_at(account, first)
    linked = classes.link_class(session, org.id, row.id, chosen, now=clock.now())
    session.commit()
    assert linked["seatsMoved"] == 1
    run(session, org.id, bridge_settings, clock)
    assert _registered_at(account, first) == []
    assert _registered_at(account, chosen) == [user_id]
    moved = session.scalars(
        select(SyncOp).where(SyncOp.op_type == "booking.create").order_by(SyncOp.id)
    ).all()
    assert [op.status for op in moved] == [OpStatus.succeeded, OpStatus.succeeded]
    # Linked back: the seat follows again, and a repeated pick moves nothing.
    assert classes.link_class(session, org.id, row.id, first, now=clock.now())["seatsMoved"] == 1
    assert classes.link_class(session, org.id, row.id, first, now=clock.now())["seatsMoved"] == 0
    session.commit()
    run(session, org.id, bridge_settings, clock)
    assert (_registered_at(account, first), _registered_at(account, chosen)) == ([user_id], [])


@pytest.mark.embedded
def test_relinking_moves_no_seat_of_a_class_already_held(
    session, org, connected, fake, account, bridge_settings, clock
):
    first, chosen, row = _seat_sent_to_the_first_of_two(
        session, org, fake, account, bridge_settings, clock
    )
    after = STARTS + timedelta(hours=2)
    assert classes.link_class(session, org.id, row.id, chosen, now=after)["seatsMoved"] == 0
    assert len(_registered_at(account, first)) == 1
